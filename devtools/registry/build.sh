#!/bin/bash
# Build a runnable Apicurio Registry 2.4.2.Final (Confluent-compatible API at /apis/ccompat/v7) from Maven Central only.
set -euo pipefail
cd "$(dirname "$0")"
REPO="${MAVEN_REPO_LOCAL:-$HOME/.m2/repository}"
V=2.4.2.Final
mvn -B -q dependency:get -Dmaven.repo.local="$REPO" -Dartifact=io.apicurio:apicurio-registry-app:$V -Dtransitive=false
mkdir -p src/main/resources
# The app's own (merged) application.properties, plus three overrides
unzip -p "$REPO/io/apicurio/apicurio-registry-app/$V/apicurio-registry-app-$V.jar" application.properties > src/main/resources/application.properties
cat >> src/main/resources/application.properties <<'PROPS'

# overrides for re-augmenting the thin jar
%prod.quarkus.package.type=fast-jar
quarkus.index-dependency.apicurioapp.group-id=io.apicurio
quarkus.index-dependency.apicurioapp.artifact-id=apicurio-registry-app
PROPS
mvn -B -Dmaven.repo.local="$REPO" package -DskipTests
