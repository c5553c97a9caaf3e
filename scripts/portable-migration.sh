#!/usr/bin/env bash
# Prints the portable variant's install (or an upgrade) as one migration in plain SQL, with
# no psql commands, for the schemas given: the file a migration tool (Alembic, dbmate,
# node-pg-migrate, Flyway, sqlx...) applies in its transaction. Derived from the psql scripts
# (sql/pg_idempotency.sql, sql/released/, sql/upgrade/), which stay the source.
#
#   scripts/portable-migration.sh [--schema S] [--storage T] [--from A] [--to B] > file.sql
#     --schema S   API schema (must exist), default public
#     --storage T  storage schema (created), default idempotency
#     --from A     the upgrade from release A to B instead of the install of B
#     --to B       default: this checkout's version
#
# A schema name that PostgreSQL cannot take as it is (empty, over 63 bytes, a control
# character, a pg_ prefix, both the same) is refused with a message, exit status 2. The
# default schemas' files are kept in sql/migrations/ (written by `cargo xtask render-sql`).
# The tool itself is xtask/src/portable_migration.rs: every plain-SQL migration file names
# this script, so it stays.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo xtask portable-migration "$@"
