"""Compute the expected value of every case in tests/data/function_cases.txt with real Spark 4 SQL.

    .venv/bin/python tools/spark_expected.py        # needs: pip install -e '.[spark]'

Spark runs with ANSI mode on (its default) and the session time zone UTC, as the local engine assumes. The output,
tests/data/spark_expected.json, is checked in: the test suite compares the local engine against it without
starting Spark.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "data" / "function_cases.txt"
OUT = ROOT / "tests" / "data" / "spark_expected.json"


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from tests.expr.spark_compare import encode

    from edgewise.engine.spark.sql import native

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["TZ"] = "UTC"
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]").appName("edgewise-spark-expected")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.ansi.enabled", "true").config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    results = []
    for line in CASES.read_text(encoding="utf-8").splitlines():
        expr = line.strip()
        if not expr or expr.startswith("#"):
            continue
        try:
            value = spark.sql(f"SELECT {native(expr)} AS v").collect()[0]["v"]
            results.append({"expr": expr, "value": encode(value)})
        except Exception as exc:  # noqa: BLE001  # any Spark failure is recorded as the expected error
            text = str(exc)
            m = re.search(r"\[([A-Z_][A-Z0-9_.]*)\]", text)
            results.append({"expr": expr, "error": m.group(1) if m else "UNKNOWN",
                            "message": text.splitlines()[0][:300]})
    OUT.write_text(json.dumps({"spark": spark.version, "cases": results}, indent=1, ensure_ascii=False) + "\n",
                   encoding="utf-8")
    spark.stop()
    print(f"wrote {len(results)} cases from Spark {spark.version} to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
