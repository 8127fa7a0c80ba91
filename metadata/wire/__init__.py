"""The metadata operations as callers see them: each declared once (`operations`), the
wire codec derived from the declarations (`codec`), their bounds and roles, and the HTTP
clients. Imports no SQLAlchemy, no FastAPI and no service (an import contract keeps it
so): Spark executors and compactor jobs import it cheaply.
"""
