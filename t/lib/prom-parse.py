"""t/lib/prom-parse.py -- a scrape of /metrics (stdin) through the Prometheus
project's own text parser (Debian's python3-prometheus-client), printed as
JSON: {"samples": [[name, {labels}, value], ...], "types": {family: type}}.
A text the parser refuses exits 1 with its complaint on stderr, so a test
that reads /metrics fails on anything Prometheus itself would not take."""

import json
import sys

from prometheus_client.parser import text_string_to_metric_families

try:
    samples, types = [], {}
    for family in text_string_to_metric_families(sys.stdin.read()):
        types[family.name] = family.type
        for s in family.samples:
            samples.append([s.name, s.labels, s.value])
except Exception as e:     # the parser's own refusal, whatever its class
    print("prometheus_client refused the text: %s" % e, file=sys.stderr)
    sys.exit(1)

json.dump({"samples": samples, "types": types}, sys.stdout)
