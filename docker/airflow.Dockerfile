# Airflow image for airflow-provider-kafka2pc: Airflow 3.3.2 plus a JRE for Spark
# local mode plus this provider with its Spark extra.
# Build context is the repository root (docker-compose.yml sets it); keep .git,
# venvs and build output out of it with a .dockerignore at the root.
FROM apache/airflow:3.3.2-python3.11

ARG PYSPARK_VERSION=4.3.0

USER root
# Spark 4 needs Java 17+; with LocalExecutor and master local[2] the JVM runs in
# the scheduler container, next to the task. The symlink gives one JAVA_HOME on
# amd64 and arm64 (Debian names the directory after the architecture).
RUN apt-get update \
  && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
  && ln -s "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17 \
  && apt-get autoremove -yqq --purge \
  && apt-get clean \
  && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17

# Packages go into the airflow user's site (the image sets PIP_USER), never as root.
USER airflow

# Owned by airflow so a build backend that writes into the source tree can.
COPY --chown=airflow:root . /opt/kafka2pc

# Pinning apache-airflow to the image's own version stops pip from upgrading or
# downgrading Airflow while it resolves our dependencies (Airflow image docs).
# pyspark is named here too so its dependencies (py4j) are resolved normally;
# the --no-deps reinstall below cannot bring them.
RUN pip install --no-cache-dir \
      "apache-airflow==${AIRFLOW_VERSION}" \
      "/opt/kafka2pc[spark,postgres]" \
      apache-airflow-providers-apache-spark \
      "pyspark==${PYSPARK_VERSION}"

# The Spark provider depends on pyspark-client, which overwrites pyspark's own
# Python files (pip check does not notice); put the full pyspark back on top.
RUN pip install --no-cache-dir --force-reinstall --no-deps "pyspark==${PYSPARK_VERSION}"
