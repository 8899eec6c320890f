"""Developer tooling that ships with the repository, not with the package.

``broker_answers``: the harness that probes what a broker's transaction coordinator
answers (``scripts/broker_answers.py`` writes ``docs/broker-answers.md`` with it;
``tests/test_broker_answers.py`` replays it).
"""
