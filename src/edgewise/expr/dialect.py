"""The expression dialect: sqlglot's Spark dialect with its function table emptied.

With an empty table every function call parses to one node type (``Anonymous``) that keeps the name the user
wrote, instead of sqlglot's normalised forms (which rewrite ``to_timestamp`` to a CAST and translate
``date_format`` patterns). edgewise resolves the name in its own function table, so the same text means the
same thing on the local engine and on Spark.
"""

from __future__ import annotations

from sqlglot.dialects.spark import Spark


class EdgewiseSpark(Spark):
    class Parser(Spark.Parser):  # type: ignore[misc,valid-type]  # sqlglot builds Parser dynamically
        FUNCTIONS: dict[str, object] = {}  # noqa: RUF012  # every call parses as Anonymous
        NO_PAREN_FUNCTIONS: dict[object, object] = {}  # noqa: RUF012  # CURRENT_DATE etc. are not allowed
        # `array(1, 2)[0]` must index the array; sqlglot's array-constructor rule reads it as `ARRAY[0]`,
        # silently dropping the elements
        ARRAY_CONSTRUCTORS: dict[str, object] = {}  # noqa: RUF012
        # keep only the parsers for real syntax (CAST(x AS t), EXTRACT(x FROM t), TRIM(BOTH c FROM s), ...)
        FUNCTION_PARSERS = {  # noqa: RUF012  # sqlglot declares it as a plain class attribute
            name: parser
            for name, parser in Spark.Parser.FUNCTION_PARSERS.items()
            if name in {"CAST", "TRY_CAST", "EXTRACT", "POSITION", "SUBSTRING", "SUBSTR", "TRIM"}
        }
