"""Print redaction's figures on the corpora: misses, false positives, time per message.

    python -m tests.privacy.redaction_report

The pass/fail limits are in ``test_redaction_corpus.py``; this prints what they limit,
and the time, which no test asserts (it depends on the machine).
"""

from __future__ import annotations

import time

from picobot.privacy.redaction import Redactor
from tests.privacy.test_redaction_corpus import ORDINARY, SECRETS, false_positives, is_miss


def per_message_us(redactor: Redactor, texts: list[str], repeat: int = 200) -> float:
    """The best of ``repeat`` timed runs over ``texts``, in microseconds per text (the
    best, as other load on the machine only ever adds time)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for text in texts:
            redactor.redact(text)
        best = min(best, (time.perf_counter() - start) / len(texts))
    return best * 1e6


def main() -> None:
    redactor = Redactor()
    misses = [line for line in SECRETS if is_miss(line, redactor)]
    changed = false_positives(redactor)
    share = 100 * len(changed) / len(ORDINARY)
    print(f"misses: {len(misses)} of {len(SECRETS)} secret texts")
    for line in misses:
        print(f"  line {line.number} ({line.kind}): {redactor.redact(line.text)!r}")
    print(f"false positives: {len(changed)} of {len(ORDINARY)} ordinary texts ({share:.1f}%)")
    for text in changed:
        print(f"  {redactor.redact(text)!r}")
    print(f"time: {per_message_us(redactor, ORDINARY):.1f} us per ordinary text")
    secret_texts = [line.text for line in SECRETS]
    print(f"time: {per_message_us(redactor, secret_texts):.1f} us per secret text")


if __name__ == "__main__":
    main()
