"""Developer tooling that ships with the repository, not with the package.

Run from the repository root (``python -m devtools broker|demo``, the tests, the benchmarks);
the wheel leaves it out (tests/integration/test_wheel.py) and the package never imports it
(import-linter).

``broker``: Apache Kafka's own broker and a replicated cluster on loopback (``kill``,
``heal``). ``demo``: ``make demo``. ``spark_submit``: the prepare application under
spark-submit without Airflow. ``visible``: the read_committed consumer, the tests' second
witness beside the log audit.

``broker_answers``: the harness that probes what a broker's transaction coordinator
answers (``scripts/broker_answers.py`` writes ``docs/broker-answers.md`` with it;
``tests/integration/test_broker_answers.py`` replays it).
"""
