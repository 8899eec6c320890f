"""The Kafka protocol, spoken directly (through kafka-python 3.0.x): the one room that
builds requests and reads answers. Free of Airflow imports, and of the transaction pieces
above it (:mod:`..transaction`), which work with the plain integers, enums and dataclasses
it answers.

Named and laid out as kafka-python 3's own ``kafka/protocol/`` (requests and answers by
API), not "wire": in this project a *wire format* is what a record's value is encoded as
(docs/wire-formats.md, :mod:`..spark.wire`). By job:

* error codes as a table: :mod:`.codes` (:class:`~.codes.ErrorCode`, :data:`~.codes.MOVED`);
  the APIs and the request versions sent: :mod:`.versions`;
* one pure builder and one pure parser per call, nothing sent: :mod:`.metadata`
  (Metadata, FindCoordinator), :mod:`.producer` (InitProducerId, AddPartitionsToTxn,
  Produce, EndTxn), :mod:`.fetch`, :mod:`.offsets` (ListOffsets: a log's start),
  :mod:`.configs` (DescribeConfigs of topics), and the record batches they carry,
  :mod:`.records`;
* the thin send per call: :class:`~.client.KafkaProtocol`; the calls kafka-python's admin
  client makes (Describe/ListTransactions): :mod:`.admin`, typed by :mod:`.described`;
* the failover transport, apart: :mod:`.transport` (one request, to a node or to whichever
  node answers), :mod:`.failover` (asked again, elsewhere, until a deadline), and
  :mod:`.login` (why a SASL login is refused);
* the seam tests script: :mod:`.seam` (what the transaction pieces need from a broker).
"""
