"""The Kafka listener side of an agent: accepting connections (`server`, `listeners`,
`listener_servers`), one connection's read-dispatch-write loop (`connection`) and the
protocol that receives its requests (`frame_reader`), its byte
and request budgets (`limits`, `response_slots`, `read_deadline`), TLS (`tls`) and SASL
(`sasl`).
"""
