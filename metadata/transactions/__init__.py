"""Transactional producers: Kafka's state machine (`state`, pure), the `transactions`
table (`store`), offsets committed in a transaction (`offsets`) and the read-only views
the compactor and retention need (`cleanup`).
"""
