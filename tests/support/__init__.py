"""What the tiers share: servers started for a test (PostgreSQL, a schema registry, Spark
Connect, a secured broker, a real scheduler), witnesses (Kafka's own Java consumer), a TCP
proxy for faults, and the scripted broker for answers a real one cannot give."""
