#!/usr/bin/env bash
# System packages the tests need, from Debian: kcat (links Debian's librdkafka) for the interop
# tests, and zookeeper (3.8, with its jars under /usr/share/java) for the cluster tests, which start
# a real ZooKeeper (sluice.testing.zookeeper). Java for Spark and ZooKeeper is expected on the
# machine (java -version); we only check for it and say so if it is missing.
set -euo pipefail
missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]} (Debian packages; zookeeper brings a Java runtime: a few minutes)"
    # Wait for another apt-get (a second checkout's `make setup`) instead of failing on its lock.
    # -q: apt's lines (what it fetches and sets up) show, its progress bars do not.
    lock=(-o DPkg::Lock::Timeout=600)
    apt-get "${lock[@]}" update -q
    DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -q --no-install-recommends "${missing[@]}"
  else
    echo "warning: ${missing[*]} not installed and cannot be installed here (need root and apt-get);" \
      "the interop (kcat) / ZooKeeper tests will skip" >&2
  fi
fi
if ! command -v java >/dev/null 2>&1; then
  echo "warning: java not found; the Spark and ZooKeeper tests need Java 17 (apt-get install openjdk-17-jre-headless)" >&2
fi
