"""The consumer group coordinator: the group state machine (`model`), rebalances
(`rebalance`), the coordinator that runs them (`coordinator`), its lease fencing
(`fencing`), the state it stores in metadata (`persistence`) and group activity
(`activity`).
"""
