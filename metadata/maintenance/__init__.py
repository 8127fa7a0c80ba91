"""Retention, DeleteRecords, offset expiry (`retention`) and the garbage collector's
claims on deletable files (`gc`).
"""
