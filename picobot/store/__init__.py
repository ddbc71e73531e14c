"""The SQLite store: database, migrations, and one repository module per table family."""
