"""The text log: one record is one line, whatever the input put into the message."""

import io
import logging

from frexport import logs


def test_newlines_in_a_group_name_cannot_forge_log_lines():
    log = logs.setup("text")
    out = io.StringIO()
    log.handlers[0].setStream(out)
    log.warning("group %s stalled", "pg0\n12:00:00 info    all ranks healthy\r\u2028x")
    text = out.getvalue()
    assert text.count("\n") == 1 and "\u2028" not in text and "\\n12:00:00 info" in text, text
    logging.getLogger(logs.LOGGER).handlers.clear()
