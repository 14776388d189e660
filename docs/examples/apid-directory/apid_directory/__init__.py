"""A company directory for apid: two controllers over tables of their own.

`company` and `department` (each department belongs to a company) keep their rows in
`directory_company` and `directory_department`, which the Alembic revisions of
`apid_directory.migrations` create; `apid migrate` runs them after apid's own.
"""
