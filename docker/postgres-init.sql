-- Runs once, when the postgres data volume is first initialised, as
-- POSTGRES_USER. The coordinator ledger gets its own role and database so it
-- never shares tables, migrations or credentials with Airflow's metadata DB.
-- Local development credentials only.
CREATE ROLE kafka2pc WITH LOGIN PASSWORD 'kafka2pc';
CREATE DATABASE kafka2pc OWNER kafka2pc;
