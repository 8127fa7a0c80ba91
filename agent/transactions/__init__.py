"""The transaction coordinator (`coordinator`: markers, expiry, re-drive) and its
environment-only test hook (`pause_hook`).
"""
