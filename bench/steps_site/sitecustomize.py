"""bench/steps.py's probes: loaded by cdc-producer and cdc-consumer through PYTHONPATH (STEPS_LOG set).

Each probe wraps one function and appends `<step> <CLOCK_MONOTONIC seconds>` to STEPS_LOG/<program>.log
(one O_APPEND write each, ~2 µs). The wrapped functions are the places a transaction passes through:

- producer: each binlog event python-mysql-replication returns (`event:<class>`), each topic append
  staged (`stage`), each topic COMMIT begun (`commit`), the readers' bell rung after it (`rung`: the records
  are visible; the WAL's fsync follows) and the append returned (`committed`);
- consumer: each read that returned records (`read`), each batch of statements handed to the writer thread
  (`queue`), its first round trip sent to the follower (by the reader thread when the writer thread is idle, else
  by that thread) and its answers read (`send`, `answered`).

Nothing here changes what the programs do; it is a bench tool, not part of them.
"""

import os
import sys
import time

_LOG = os.environ.get("STEPS_LOG")
_PROGRAM = os.path.basename(sys.argv[0]) if sys.argv else ""

if _LOG and _PROGRAM in ("cdc-producer", "cdc-consumer"):
    _fd = os.open(os.path.join(_LOG, _PROGRAM + ".log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _note(step: str) -> None:
        os.write(_fd, f"{step} {time.monotonic():.6f}\n".encode())

    def _around(owner, name, before=None, after=None):
        inner = getattr(owner, name)

        def probe(*args, **kwargs):
            if before:
                _note(before)
            result = inner(*args, **kwargs)
            step = after(result) if callable(after) else after
            if step:
                _note(step)
            return result

        setattr(owner, name, probe)

    from cdc_stream.topics import bell, embedded

    _around(embedded.EmbeddedTopic, "_commit", "commit", "committed")
    if _PROGRAM == "cdc-producer":
        from pymysqlreplication import binlogstream

        _around(binlogstream.BinLogStreamReader, "fetchone",
                after=lambda ev: None if ev is None else f"event:{type(ev).__name__}")
        _around(embedded.EmbeddedTopic, "_write", "stage")
        _around(bell.Bell, "ring", after="rung")
    else:
        from cdc_consumer import writer

        _around(embedded.EmbeddedTopic, "read", after=lambda records: "read" if records else None)
        _around(writer.Writer, "submit", "queue")
        if hasattr(writer, "Execution"):
            for send in ("send_query", "send_bulk"):  # (writer.Execution looks them up at each call)
                _around(writer, send, "send")
            _around(writer.Execution, "finish", after="answered")
        else:  # (an older --before tree)
            _around(writer, "execute", "send", "answered")  # writer.Writer._run looks it up at each call
