"""The directory's Alembic revision files: only these, apid's own env.py runs them."""
