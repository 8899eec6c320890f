"""Connection settings: how this package reaches Kafka and the schema registry, and what
it may do there. Free of Airflow imports, and of the protocol and transaction rooms above
it.

* :mod:`.settings`: one librdkafka-style mapping for both Kafka clients, translated for
  kafka-python, and the redaction that keeps secrets (SASL, TLS key passwords) out of
  logs;
* :mod:`.tls`: one TLS handshake made as the clients would, before anything opens;
* :mod:`.acls`: the ACLs an export's principal needs, and the broker's refusals as errors
  that name the missing one;
* :mod:`.registry`: the schema registry's client settings and its one lookup per export.
"""
