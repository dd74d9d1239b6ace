"""Small pieces the benchmark scripts share: the --durability modes, logging, argument parsing of
mode lists, rotation of run order across rounds, and turning SIGTERM into KeyboardInterrupt so
that every script cleans up its processes the same way."""
import argparse
import sys

MODES = ("sync", "none", "async")


def log(message):
    print(message, file=sys.stderr, flush=True)


def rotated(items, shift):
    """`items` started at position `shift`: each round runs them in another order, so that the
    machine's drift does not always hit the same one."""
    shift %= max(len(items), 1)
    return items[shift:] + items[:shift]


def comma_modes(text):
    values = [part.strip() for part in text.split(",") if part.strip()]
    if not values or any(v not in MODES for v in values):
        raise argparse.ArgumentTypeError(f"modes are a comma-separated list of {', '.join(MODES)}")
    return values


def raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")
