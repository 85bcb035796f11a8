-- Run by psql as the superuser, once, when the PostgreSQL volume is first initialised.
-- The brokers connect as the role "broker", not as the superuser: it owns their databases, so it
-- migrates them and signals its own sessions (a stalled claim turn), and it can do nothing else.
\getenv broker_password BROKER_DB_PASSWORD
CREATE ROLE broker LOGIN PASSWORD :'broker_password';
-- One database per broker instance (queue manager): each broker is its own queue manager.
CREATE DATABASE qma OWNER broker;
CREATE DATABASE qmb OWNER broker;
CREATE DATABASE qmc OWNER broker;
REVOKE ALL ON DATABASE qma, qmb, qmc FROM PUBLIC;
