"""The consumer group coordinator: the classic protocol's group state machine (`model`),
rebalances (`rebalance`), the coordinator that runs them (`coordinator`), its lease fencing
(`fencing`), the state it stores in metadata (`persistence`) and group activity
(`activity`); the consumer protocol of KIP-848 (`consumer_protocol`) over its model and
reconciliation (`consumer_model`), its server-side assignors (`assignors`), its offset
checks (`consumer_offsets`) and its stored state (`consumer_persistence`); mixed groups of
both protocols and the online upgrade and downgrade (`mixed`), over the classic clients'
embedded protocol (`embedded_protocol`).
"""
