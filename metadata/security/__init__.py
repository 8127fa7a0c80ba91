"""Who may do what on the Kafka listeners: ACL bindings (`acls`, `acl_types`) and SCRAM
credentials (`scram_users`, `scram_types`).
"""
