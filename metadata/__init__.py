"""The metadata service: SQL tables, the transactional operations on them, the FastAPI app and the client the other packages use to talk to it."""
