"""Code mode vs JSON tool calling: correctness, context, re-read input, round trips and wall time.

A scripted agent solves the same tasks two ways, over three MCP servers with deterministic data
(`benchmarks/servers/domains.py`: shop and weather answer small results, logs 1,000 records):

- JSON tool calling: the real `mcp.Client` calls the domain server's tools one by one; the
  context gets the tool definitions (as an LLM API gets them: name, description, input schema,
  from the live `tools/list`), each call's arguments and each result's text.
- code mode: the real `mcp.Client` talks to `ipybox --workspace W` over stdio; the context gets
  ipybox's tool definitions and server instructions (live), the `register_mcp_server` call and
  reply, one read of the server's signatures (`print(mcptools.<server>.__doc__)`), and per task
  one code action and its output.

One conversation per domain and mode. Each round trip is one model call that reads the whole
context so far; re-read input is the sum of the context over all model calls (each task also
ends with one answering call). Task prompts and answers are the same both ways and not counted.
Tokens are bytes / 4. Both protocol eras are run: `mode="auto"` (2026-07-28) and `"legacy"`.

Usage: uv run python benchmarks/bench_codemode.py [--quick] [--modes auto,legacy]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SERVER = REPO / "benchmarks" / "servers" / "domains.py"
sys.path.insert(0, str(SERVER.parent))

from domains import data  # noqa: E402

Call = Callable[[str, dict[str, Any]], Awaitable[Any]]
SMALL, LARGE = ("shop", "weather"), ("logs",)


@dataclass
class Task:
    domain: str
    question: str
    answer: Any  # known from the data
    plan: Callable[[Call], Awaitable[Any]]  # the JSON calls a scripted agent makes, and its answer
    code: str  # the one code action a scripted agent writes after reading the signatures


def _r(x: float) -> float:
    return round(x, 2)


# --- tasks ------------------------------------------------------------------------------------------


def tasks() -> list[Task]:
    shop, weather, logs = data("shop"), data("weather"), data("logs")
    products, orders = shop["products"], shop["orders"]
    out: list[Task] = []

    def add(domain: str, question: str, answer: Any, code: str) -> Callable[..., Any]:
        def register(plan: Callable[[Call], Awaitable[Any]]) -> Callable[[Call], Awaitable[Any]]:
            out.append(Task(domain, question, answer, plan, code.strip()))
            return plan

        return register

    # shop -------------------------------------------------------------------------------------------
    def in_cat(c: str) -> list[dict[str, Any]]:
        return [p for p in products.values() if p["category"] == c]

    def of_customer(c: str) -> list[dict[str, Any]]:
        return [o for o in orders.values() if o["customer_id"] == c]

    @add(
        "shop",
        "Stock value (price x stock) of the kitchen category?",
        _r(sum(p["price"] * p["stock"] for p in in_cat("kitchen"))),
        """
from mcptools.shop import list_category, get_product
ids = list_category.run(list_category.Params(category="kitchen")).ids
ps = [get_product.run(get_product.Params(product_id=i)) for i in ids]
print(round(sum(p.price * p.stock for p in ps), 2))""",
    )
    async def _(call: Call) -> Any:
        ids = (await call("list_category", {"category": "kitchen"}))["ids"]
        ps = [await call("get_product", {"product_id": i}) for i in ids]
        return _r(sum(p["price"] * p["stock"] for p in ps))

    @add(
        "shop",
        "Cheapest product in toys (its id)?",
        min(in_cat("toys"), key=lambda p: p["price"])["id"],
        """
from mcptools.shop import list_category, get_product
ids = list_category.run(list_category.Params(category="toys")).ids
ps = [get_product.run(get_product.Params(product_id=i)) for i in ids]
print(min(ps, key=lambda p: p.price).id)""",
    )
    async def _(call: Call) -> Any:
        ids = (await call("list_category", {"category": "toys"}))["ids"]
        ps = [await call("get_product", {"product_id": i}) for i in ids]
        return min(ps, key=lambda p: p["price"])["id"]

    @add(
        "shop",
        "How many of C03's orders are shipped?",
        sum(o["status"] == "shipped" for o in of_customer("C03")),
        """
from mcptools.shop import customer_orders, get_order
ids = customer_orders.run(customer_orders.Params(customer_id="C03")).ids
print(sum(get_order.run(get_order.Params(order_id=i)).status == "shipped" for i in ids))""",
    )
    async def _(call: Call) -> Any:
        ids = (await call("customer_orders", {"customer_id": "C03"}))["ids"]
        return sum([(await call("get_order", {"order_id": i}))["status"] == "shipped" for i in ids])

    @add(
        "shop",
        "Units C05 ordered in all orders?",
        sum(i["qty"] for o in of_customer("C05") for i in o["items"]),
        """
from mcptools.shop import customer_orders, get_order
ids = customer_orders.run(customer_orders.Params(customer_id="C05")).ids
print(sum(it.qty for i in ids for it in get_order.run(get_order.Params(order_id=i)).items))""",
    )
    async def _(call: Call) -> Any:
        ids = (await call("customer_orders", {"customer_id": "C05"}))["ids"]
        return sum([it["qty"] for i in ids for it in (await call("get_order", {"order_id": i}))["items"]])

    @add(
        "shop",
        "What did C02 spend over all orders (qty x price)?",
        _r(
            sum(i["qty"] * products[i["product_id"]]["price"] for o in of_customer("C02") for i in o["items"])
        ),
        """
from mcptools.shop import customer_orders, get_order, get_product
items = [it for i in customer_orders.run(customer_orders.Params(customer_id="C02")).ids
         for it in get_order.run(get_order.Params(order_id=i)).items]
price = {p: get_product.run(get_product.Params(product_id=p)).price for p in {it.product_id for it in items}}
print(round(sum(it.qty * price[it.product_id] for it in items), 2))""",
    )
    async def _(call: Call) -> Any:
        ids = (await call("customer_orders", {"customer_id": "C02"}))["ids"]
        items = [it for i in ids for it in (await call("get_order", {"order_id": i}))["items"]]
        price = {}
        for p in dict.fromkeys(it["product_id"] for it in items):
            price[p] = (await call("get_product", {"product_id": p}))["price"]
        return _r(sum(it["qty"] * price[it["product_id"]] for it in items))

    @add(
        "shop",
        "Products with fewer than 5 in stock in books and sports?",
        sum(p["stock"] < 5 for c in ("books", "sports") for p in in_cat(c)),
        """
from mcptools.shop import list_category, get_product
ids = [i for c in ("books", "sports") for i in list_category.run(list_category.Params(category=c)).ids]
print(sum(get_product.run(get_product.Params(product_id=i)).stock < 5 for i in ids))""",
    )
    async def _(call: Call) -> Any:
        ids = [i for c in ("books", "sports") for i in (await call("list_category", {"category": c}))["ids"]]
        return sum([(await call("get_product", {"product_id": i}))["stock"] < 5 for i in ids])

    @add(
        "shop",
        "Name of the most expensive product in garden?",
        max(in_cat("garden"), key=lambda p: p["price"])["name"],
        """
from mcptools.shop import list_category, get_product
ids = list_category.run(list_category.Params(category="garden")).ids
ps = [get_product.run(get_product.Params(product_id=i)) for i in ids]
print(max(ps, key=lambda p: p.price).name)""",
    )
    async def _(call: Call) -> Any:
        ids = (await call("list_category", {"category": "garden"}))["ids"]
        ps = [await call("get_product", {"product_id": i}) for i in ids]
        return max(ps, key=lambda p: p["price"])["name"]

    # weather ----------------------------------------------------------------------------------------
    cities, fc, st = weather["cities"], weather["forecasts"], weather["stations"]

    def region(r: str) -> list[str]:
        return [c for c, reg in cities.items() if reg == r]

    @add(
        "weather",
        "Warmest city in the north on day 3 (highest high)?",
        max(region("north"), key=lambda c: fc[c, 3]["high_c"]),
        """
from mcptools.weather import list_cities, forecast
cs = list_cities.run(list_cities.Params(region="north")).cities
print(max(cs, key=lambda c: forecast.run(forecast.Params(city=c, day=3)).high_c))""",
    )
    async def _(call: Call) -> Any:
        cs = (await call("list_cities", {"region": "north"}))["cities"]
        highs = {c: (await call("forecast", {"city": c, "day": 3}))["high_c"] for c in cs}
        return max(cs, key=lambda c: highs[c])

    @add(
        "weather",
        "Average high of east-b over the week?",
        _r(statistics.mean(fc["east-b", d]["high_c"] for d in range(1, 8))),
        """
import statistics
from mcptools.weather import forecast
highs = [forecast.run(forecast.Params(city="east-b", day=d)).high_c for d in range(1, 8)]
print(round(statistics.mean(highs), 2))""",
    )
    async def _(call: Call) -> Any:
        return _r(
            statistics.mean(
                [(await call("forecast", {"city": "east-b", "day": d}))["high_c"] for d in range(1, 8)]
            )
        )

    @add(
        "weather",
        "Total rain in the south on day 1 (mm)?",
        _r(sum(fc[c, 1]["rain_mm"] for c in region("south"))),
        """
from mcptools.weather import list_cities, forecast
cs = list_cities.run(list_cities.Params(region="south")).cities
print(round(sum(forecast.run(forecast.Params(city=c, day=1)).rain_mm for c in cs), 2))""",
    )
    async def _(call: Call) -> Any:
        cs = (await call("list_cities", {"region": "south"}))["cities"]
        return _r(sum([(await call("forecast", {"city": c, "day": 1}))["rain_mm"] for c in cs]))

    @add(
        "weather",
        "Days of rain for west-d this week?",
        sum(fc["west-d", d]["condition"] == "rain" for d in range(1, 8)),
        """
from mcptools.weather import forecast
print(sum(forecast.run(forecast.Params(city="west-d", day=d)).condition == "rain" for d in range(1, 8)))""",
    )
    async def _(call: Call) -> Any:
        return sum(
            [
                (await call("forecast", {"city": "west-d", "day": d}))["condition"] == "rain"
                for d in range(1, 8)
            ]
        )

    @add(
        "weather",
        "Highest station in the east?",
        max(region("east"), key=lambda c: st[c]["elevation_m"]),
        """
from mcptools.weather import list_cities, station_info
cs = list_cities.run(list_cities.Params(region="east")).cities
print(max(cs, key=lambda c: station_info.run(station_info.Params(city=c)).elevation_m))""",
    )
    async def _(call: Call) -> Any:
        cs = (await call("list_cities", {"region": "east"}))["cities"]
        elev = {c: (await call("station_info", {"city": c}))["elevation_m"] for c in cs}
        return max(cs, key=lambda c: elev[c])

    @add(
        "weather",
        "Largest day-2 temperature range in the west?",
        max(fc[c, 2]["high_c"] - fc[c, 2]["low_c"] for c in region("west")),
        """
from mcptools.weather import list_cities, forecast
cs = list_cities.run(list_cities.Params(region="west")).cities
fs = [forecast.run(forecast.Params(city=c, day=2)) for c in cs]
print(max(f.high_c - f.low_c for f in fs))""",
    )
    async def _(call: Call) -> Any:
        cs = (await call("list_cities", {"region": "west"}))["cities"]
        fs = [await call("forecast", {"city": c, "day": 2}) for c in cs]
        return max(f["high_c"] - f["low_c"] for f in fs)

    @add(
        "weather",
        "Wettest north city over days 1-3?",
        max(region("north"), key=lambda c: sum(fc[c, d]["rain_mm"] for d in (1, 2, 3))),
        """
from mcptools.weather import list_cities, forecast
cs = list_cities.run(list_cities.Params(region="north")).cities
print(max(cs, key=lambda c: sum(forecast.run(forecast.Params(city=c, day=d)).rain_mm for d in (1, 2, 3))))""",
    )
    async def _(call: Call) -> Any:
        cs = (await call("list_cities", {"region": "north"}))["cities"]
        rain = {
            c: sum([(await call("forecast", {"city": c, "day": d}))["rain_mm"] for d in (1, 2, 3)])
            for c in cs
        }
        return max(cs, key=lambda c: rain[c])

    # logs -------------------------------------------------------------------------------------------
    lg, owners = logs["logs"], logs["owners"]

    def errors(s: str) -> int:
        return sum(r["level"] == "ERROR" for r in lg[s])

    @add(
        "logs",
        "ERROR records of api today?",
        errors("api"),
        """
from mcptools.logs import fetch_logs
print(sum(r.level == "ERROR" for r in fetch_logs.run(fetch_logs.Params(service="api")).records))""",
    )
    async def _(call: Call) -> Any:
        return sum(r["level"] == "ERROR" for r in (await call("fetch_logs", {"service": "api"}))["records"])

    @add(
        "logs",
        "Service with the most errors?",
        max(lg, key=errors),
        """
from mcptools.logs import list_services, fetch_logs
svcs = list_services.run(list_services.Params()).services
logs = {s: fetch_logs.run(fetch_logs.Params(service=s)).records for s in svcs}
errors = {s: sum(r.level == "ERROR" for r in logs[s]) for s in svcs}
print(max(svcs, key=errors.get))""",
    )
    async def _(call: Call) -> Any:
        svcs = (await call("list_services", {}))["services"]
        errs = {
            s: sum(r["level"] == "ERROR" for r in (await call("fetch_logs", {"service": s}))["records"])
            for s in svcs
        }
        return max(svcs, key=lambda s: errs[s])

    @add(
        "logs",
        "Median latency of 'GET /items' in api (ms)?",
        _r(statistics.median(r["latency_ms"] for r in lg["api"] if r["path"] == "GET /items")),
        """
import statistics
from mcptools.logs import fetch_logs
recs = fetch_logs.run(fetch_logs.Params(service="api")).records
print(round(statistics.median(r.latency_ms for r in recs if r.path == "GET /items"), 2))""",
    )
    async def _(call: Call) -> Any:
        recs = (await call("fetch_logs", {"service": "api"}))["records"]
        return _r(statistics.median(r["latency_ms"] for r in recs if r["path"] == "GET /items"))

    slowest = max(lg, key=lambda s: statistics.mean(r["latency_ms"] for r in lg[s]))

    @add(
        "logs",
        "Owner of the service with the highest mean latency?",
        owners[slowest]["owner"],
        """
import statistics
from mcptools.logs import list_services, fetch_logs, service_owner
svcs = list_services.run(list_services.Params()).services
logs = {s: fetch_logs.run(fetch_logs.Params(service=s)).records for s in svcs}
mean = {s: statistics.mean(r.latency_ms for r in logs[s]) for s in svcs}
s = max(svcs, key=mean.get)
print(service_owner.run(service_owner.Params(service=s)).owner)""",
    )
    async def _(call: Call) -> Any:
        svcs = (await call("list_services", {}))["services"]
        means = {
            s: statistics.mean(r["latency_ms"] for r in (await call("fetch_logs", {"service": s}))["records"])
            for s in svcs
        }
        return (await call("service_owner", {"service": max(svcs, key=lambda s: means[s])}))["owner"]

    @add(
        "logs",
        "5xx responses across all services?",
        sum(r["status"] >= 500 for s in lg for r in lg[s]),
        """
from mcptools.logs import list_services, fetch_logs
svcs = list_services.run(list_services.Params()).services
print(sum(r.status >= 500 for s in svcs for r in fetch_logs.run(fetch_logs.Params(service=s)).records))""",
    )
    async def _(call: Call) -> Any:
        svcs = (await call("list_services", {}))["services"]
        return sum(
            [r["status"] >= 500 for s in svcs for r in (await call("fetch_logs", {"service": s}))["records"]]
        )

    @add(
        "logs",
        "Path of the slowest billing request?",
        max(lg["billing"], key=lambda r: r["latency_ms"])["path"],
        """
from mcptools.logs import fetch_logs
print(max(fetch_logs.run(fetch_logs.Params(service="billing")).records, key=lambda r: r.latency_ms).path)""",
    )
    async def _(call: Call) -> Any:
        return max(
            (await call("fetch_logs", {"service": "billing"}))["records"], key=lambda r: r["latency_ms"]
        )["path"]

    return out


# --- accounting -------------------------------------------------------------------------------------


@dataclass
class Conversation:
    """The context of one conversation: fixed definitions, then what each round trip adds."""

    base: int  # bytes of tool definitions (and server instructions)
    added: int = 0
    round_trips: int = 0
    model_calls: int = 0
    reread: int = 0
    correct: int = 0
    tasks: int = 0
    seconds: float = 0.0

    @property
    def context(self) -> int:
        return self.base + self.added

    def model_call(self) -> None:
        self.model_calls += 1
        self.reread += self.context

    def round_trip(self, sent: int, received: int) -> None:
        self.model_call()
        self.round_trips += 1
        self.added += sent + received

    # The same tasks, each in a conversation of its own: each pays the set-up (the signature read)
    # again, except registration, which a workspace keeps (paid once, in the first task).
    setup: tuple[int, int] | None = None  # bytes added and round trips before the first task
    registration: tuple[int, int] = (0, 0)  # the part of the set-up that registration is
    alone_context: int = 0
    alone_round_trips: int = 0
    _mark: tuple[int, int] = (0, 0)

    def registered(self) -> None:
        self.registration = (self.added, self.round_trips)

    def task_started(self) -> None:
        if self.setup is None:
            self.setup = (self.added, self.round_trips)
        self._mark = (self.added, self.round_trips)

    def task_done(self, correct: bool) -> None:
        self.model_call()  # the answer
        self.tasks += 1
        self.correct += correct
        assert self.setup is not None
        once = 0 if self.tasks > 1 else 1
        setup_bytes = self.setup[0] - self.registration[0] * (1 - once)
        setup_trips = self.setup[1] - self.registration[1] * (1 - once)
        self.alone_context += self.base + setup_bytes + self.added - self._mark[0]
        self.alone_round_trips += setup_trips + self.round_trips - self._mark[1]


def definitions(tools: Any) -> int:
    """Bytes of tool definitions as an LLM API gets them (name, description, input schema)."""
    return sum(
        len(json.dumps({"name": t.name, "description": t.description or "", "input_schema": t.input_schema}))
        for t in tools
    )


def result_text(result: Any) -> str:
    texts = [block.text for block in result.content if getattr(block, "type", "") == "text"]
    return "\n".join(texts) if texts else json.dumps(result.structured_content)


def params(domain: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVER), domain]}


def same(a: Any, b: Any) -> bool:
    return str(a).strip() == str(b).strip()


async def run_json(domain: str, items: list[Task], mode: str) -> Conversation:
    from mcp import Client, StdioServerParameters

    started = time.perf_counter()
    p = params(domain)
    async with Client(StdioServerParameters(command=p["command"], args=p["args"]), mode=mode) as client:  # type: ignore[arg-type]
        convo = Conversation(definitions((await client.list_tools()).tools))

        async def call(name: str, args: dict[str, Any]) -> Any:
            result = await client.call_tool(name, args)
            convo.round_trip(len(json.dumps({"name": name, "input": args})), len(result_text(result)))
            return result.structured_content

        for task in items:
            convo.task_started()
            answer = await task.plan(call)
            convo.task_done(same(answer, task.answer))
    convo.seconds = time.perf_counter() - started
    return convo


async def run_code(domain: str, items: list[Task], mode: str, workspace: Path) -> Conversation:
    from mcp import Client, StdioServerParameters

    started = time.perf_counter()
    script = Path(sys.executable).parent / "ipybox"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "ipybox.mcp_server"]
    server = StdioServerParameters(
        command=command[0], args=[*command[1:], "--workspace", str(workspace)], env=dict(os.environ)
    )
    async with Client(server, mode=mode) as client:  # type: ignore[arg-type]
        base = definitions((await client.list_tools()).tools) + len(client.instructions or "")
        convo = Conversation(base)

        async def tool(name: str, args: dict[str, Any]) -> str:
            result = await client.call_tool(name, args)
            text = result_text(result)
            if result.is_error:
                raise RuntimeError(f"{name} failed: {text}")
            convo.round_trip(len(json.dumps({"name": name, "input": args})), len(text))
            return text

        await tool("register_mcp_server", {"server_name": domain, "server_params": params(domain)})
        convo.registered()
        await tool("execute_ipython_cell", {"code": f"import mcptools.{domain} as s; print(s.__doc__)"})
        for task in items:
            convo.task_started()
            output = await tool("execute_ipython_cell", {"code": task.code})
            convo.task_done(same(output.strip().splitlines()[-1] if output.strip() else "", task.answer))
    convo.seconds = time.perf_counter() - started
    return convo


# --- report -----------------------------------------------------------------------------------------


@dataclass
class Row:
    domain: str
    mode: str
    json: Conversation
    code: Conversation
    notes: list[str] = field(default_factory=list)


def _sum(convos: list[Conversation]) -> Conversation:
    total = Conversation(sum(c.base for c in convos))
    for c in convos:
        total.added += c.added
        total.round_trips += c.round_trips
        total.model_calls += c.model_calls
        total.reread += c.reread
        total.correct += c.correct
        total.tasks += c.tasks
        total.seconds += c.seconds
        total.alone_context += c.alone_context
        total.alone_round_trips += c.alone_round_trips
    return total


def table(rows: list[Row]) -> str:
    head = (
        "| domain | era | tasks | correct JSON / code | context tokens JSON / code (x) | "
        "re-read tokens JSON / code (x) | round trips JSON / code (x) | wall s JSON / code |"
    )
    lines = [head, "|" + " --- |" * 8]
    groups: list[tuple[str, str, Conversation, Conversation]] = [
        (r.domain, r.mode, r.json, r.code) for r in rows
    ]
    for label, domains in (("small results", SMALL), ("large results", LARGE), ("total", SMALL + LARGE)):
        for mode in dict.fromkeys(r.mode for r in rows):
            chosen = [r for r in rows if r.mode == mode and r.domain in domains]
            if chosen:
                groups.append(
                    (f"**{label}**", mode, _sum([r.json for r in chosen]), _sum([r.code for r in chosen]))
                )
    alone = [
        "",
        "Each task in a conversation of its own (code mode reads the signatures every time and "
        "registers once per workspace):",
        "",
        "| domain | era | context tokens JSON / code (x) | round trips JSON / code (x) |",
        "|" + " --- |" * 4,
    ]
    for domain, mode, j, c in groups:
        alone.append(
            f"| {domain} | {mode} | {j.alone_context // 4:,} / {c.alone_context // 4:,} "
            f"({c.alone_context / j.alone_context:.2f}) | {j.alone_round_trips} / {c.alone_round_trips} "
            f"({c.alone_round_trips / j.alone_round_trips:.2f}) |"
        )
    for domain, mode, j, c in groups:
        lines.append(
            f"| {domain} | {mode} | {j.tasks} | {j.correct} / {c.correct} | "
            f"{j.context // 4:,} / {c.context // 4:,} ({c.context / j.context:.2f}) | "
            f"{j.reread // 4:,} / {c.reread // 4:,} ({c.reread / j.reread:.2f}) | "
            f"{j.round_trips} / {c.round_trips} ({c.round_trips / j.round_trips:.2f}) | "
            f"{j.seconds:.1f} / {c.seconds:.1f} |"
        )
    return "\n".join(lines + alone)


async def measure(quick: bool = False, modes: tuple[str, ...] = ("auto", "legacy")) -> list[Row]:
    """Run every task both ways in each protocol era; `quick`: two tasks per domain, `auto` only."""
    all_tasks = tasks()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ipybox-bench-codemode-") as tmp:
        os.environ.setdefault("IPYBOX_STATE_DIR", str(Path(tmp) / "state"))
        for mode in modes[:1] if quick else modes:
            for domain in ("shop", "weather", "logs"):
                items = [t for t in all_tasks if t.domain == domain][: 2 if quick else None]
                workspace = Path(tmp) / f"ws-{mode}-{domain}"
                workspace.mkdir()
                json_convo = await run_json(domain, items, mode)
                code_convo = await run_code(domain, items, mode, workspace)
                rows.append(Row(domain, mode, json_convo, code_convo))
    return rows


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="two tasks per domain, mode auto only")
    parser.add_argument("--modes", default="auto,legacy", help="protocol eras (default auto,legacy)")
    args = parser.parse_args()
    rows = await measure(args.quick, tuple(args.modes.split(",")))
    print(table(rows))
    return 0 if all(r.code.correct == r.code.tasks == r.json.correct for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
