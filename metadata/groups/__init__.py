"""Consumer groups: committed offsets (`offsets`), coordinator leases (`leases`,
`lease_types`) and the operators' view (`admin`).
"""
