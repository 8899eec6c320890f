"""The transaction machinery: writing, handing over, finishing and verifying Kafka
transactions. Free of Airflow imports; every raw protocol use sits in :mod:`..protocol`,
below it, and the connection settings (TLS, SASL, ACLs) in :mod:`..connection`.

The public types, by job:

* writing a prepared transaction: :class:`~.writer.TransactionalWriter` (librdkafka),
  :class:`~.native_writer.NativeWriter` (KIP-939 at protocol level);
* the handle any process finishes it from: :class:`~.committable.Committable`, and the
  prepare job's :class:`~.manifest.Manifest` of them;
* finishing it: :class:`~.controller.TransactionController` (EndTxn with the stored
  producer id and epoch), which answers an :class:`~.controller.Outcome` per
  :class:`~.controller.Resolution`;
* the coordinator's view: :class:`~..protocol.described.CoordinatorTxnState`,
  :class:`~..protocol.described.DescribedTransaction`; the log's view:
  :class:`~.log.MarkerView`;
* verifying: :func:`~.audit.audit_topic` (the markers; the tests' second witness, a
  read_committed consumer, is ``devtools/visible.py`` in the checkout);
* naming: :mod:`..naming` builds, parses and matches transactional ids.
"""
