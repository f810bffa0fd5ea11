#!/usr/bin/env bash
# System packages the interop tests need: kcat (links Debian's librdkafka). Java for Spark is
# expected on the machine (java -version); we only check for it and say so if it is missing.
set -euo pipefail
if ! command -v kcat >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing kcat (Debian package)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null
  else
    echo "warning: kcat is not installed and cannot be installed here (need root and apt-get)" >&2
  fi
fi
if ! command -v java >/dev/null 2>&1; then
  echo "warning: java not found; the Spark tests need Java 17 (apt-get install openjdk-17-jre-headless)" >&2
fi
