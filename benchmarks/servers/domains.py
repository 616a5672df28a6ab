"""Three small MCP servers with deterministic data, for `bench_codemode.py`.

Run one over stdio: `python benchmarks/servers/domains.py shop|weather|logs`. The data are
made by `random.Random` with a fixed seed, so the answers of the benchmark's tasks are known:
`data(domain)` gives them to the benchmark without a server.

- shop: products by category and orders by customer (small results);
- weather: cities by region, daily forecasts, stations (small results);
- logs: 1,000 request records per service (large results).
"""

import random
import sys
from typing import Any

CATEGORIES = ["tools", "garden", "kitchen", "toys", "books", "sports"]
REGIONS = ["north", "south", "east", "west"]
CONDITIONS = ["sun", "cloud", "rain", "snow"]
SERVICES = ["api", "auth", "billing", "search"]
PATHS = ["GET /items", "POST /items", "GET /users", "POST /login", "GET /health"]


def data(domain: str) -> dict[str, Any]:
    """The deterministic data set of a domain."""
    rng = random.Random(f"ipybox-bench-{domain}")
    if domain == "shop":
        products = {
            f"P{i:03d}": {
                "id": f"P{i:03d}",
                "name": f"{rng.choice(['Red', 'Blue', 'Big', 'Mini', 'Pro'])} item {i}",
                "category": CATEGORIES[i % len(CATEGORIES)],
                "price": round(rng.uniform(2, 200), 2),
                "stock": rng.randint(0, 40),
            }
            for i in range(1, 61)
        }
        orders = {
            f"O{i:03d}": {
                "id": f"O{i:03d}",
                "customer_id": f"C{rng.randint(1, 8):02d}",
                "status": rng.choice(["new", "shipped", "delivered", "cancelled"]),
                "items": [
                    {"product_id": rng.choice(list(products)), "qty": rng.randint(1, 5)}
                    for _ in range(rng.randint(1, 4))
                ],
            }
            for i in range(1, 81)
        }
        return {"products": products, "orders": orders}
    if domain == "weather":
        cities = {f"{region}-{n}": region for region in REGIONS for n in ("a", "b", "c", "d", "e", "f")}
        forecasts = {}
        for city in cities:
            for day in range(1, 8):
                low = rng.randint(-5, 15)
                forecasts[city, day] = {
                    "city": city,
                    "day": day,
                    "high_c": low + rng.randint(3, 15),
                    "low_c": low,
                    "condition": rng.choice(CONDITIONS),
                    "rain_mm": round(rng.uniform(0, 20), 1),
                }
        stations = {
            city: {"city": city, "elevation_m": rng.randint(0, 2500), "lat": round(rng.uniform(-60, 60), 3)}
            for city in cities
        }
        return {"cities": cities, "forecasts": forecasts, "stations": stations}
    if domain == "logs":
        logs = {
            service: [
                {
                    "ts": 1_700_000_000 + i * 7,
                    "level": rng.choices(["INFO", "WARN", "ERROR"], [85, 10, 5])[0],
                    "path": rng.choice(PATHS),
                    "latency_ms": round(rng.lognormvariate(3.5, 0.6), 1),
                    "status": rng.choices([200, 201, 404, 500, 503], [80, 8, 6, 4, 2])[0],
                }
                for i in range(1000)
            ]
            for service in SERVICES
        }
        owners = {
            s: {"service": s, "owner": f"owner-{s}", "team": rng.choice(["core", "edge"])} for s in SERVICES
        }
        return {"logs": logs, "owners": owners}
    raise ValueError(f"unknown domain {domain!r}; use shop, weather or logs")


def server(domain: str) -> Any:
    """The MCP server of a domain (an `MCPServer` with typed tools)."""
    from mcp.server.mcpserver import MCPServer
    from pydantic import BaseModel

    d = data(domain)
    mcp = MCPServer(domain)

    if domain == "shop":

        class Product(BaseModel):
            id: str
            name: str
            category: str
            price: float
            stock: int

        class Item(BaseModel):
            product_id: str
            qty: int

        class Order(BaseModel):
            id: str
            customer_id: str
            status: str
            items: list[Item]

        class Ids(BaseModel):
            ids: list[str]

        @mcp.tool()
        def list_category(category: str) -> Ids:
            """IDs of the products in a category (tools, garden, kitchen, toys, books, sports)."""
            return Ids(ids=[p["id"] for p in d["products"].values() if p["category"] == category])

        @mcp.tool()
        def get_product(product_id: str) -> Product:
            """One product: name, category, price and units in stock."""
            return Product(**d["products"][product_id])

        @mcp.tool()
        def customer_orders(customer_id: str) -> Ids:
            """IDs of a customer's orders (customer IDs look like C01)."""
            return Ids(ids=[o["id"] for o in d["orders"].values() if o["customer_id"] == customer_id])

        @mcp.tool()
        def get_order(order_id: str) -> Order:
            """One order: customer, status (new, shipped, delivered, cancelled) and items."""
            return Order(**d["orders"][order_id])

    elif domain == "weather":

        class Forecast(BaseModel):
            city: str
            day: int
            high_c: int
            low_c: int
            condition: str
            rain_mm: float

        class Station(BaseModel):
            city: str
            elevation_m: int
            lat: float

        class Cities(BaseModel):
            cities: list[str]

        @mcp.tool()
        def list_cities(region: str) -> Cities:
            """The cities of a region (north, south, east, west)."""
            return Cities(cities=[c for c, r in d["cities"].items() if r == region])

        @mcp.tool()
        def forecast(city: str, day: int) -> Forecast:
            """The forecast for a city on day 1-7: high and low in °C, condition, rain in mm."""
            return Forecast(**d["forecasts"][city, day])

        @mcp.tool()
        def station_info(city: str) -> Station:
            """The weather station of a city: elevation in meters and latitude."""
            return Station(**d["stations"][city])

    else:

        class Record(BaseModel):
            ts: int
            level: str
            path: str
            latency_ms: float
            status: int

        class Logs(BaseModel):
            records: list[Record]

        class Owner(BaseModel):
            service: str
            owner: str
            team: str

        class Services(BaseModel):
            services: list[str]

        @mcp.tool()
        def list_services() -> Services:
            """The names of the services that have logs."""
            return Services(services=list(d["logs"]))

        @mcp.tool()
        def fetch_logs(service: str) -> Logs:
            """All request records of a service today (1,000): time, level, path, latency, HTTP status."""
            return Logs(records=d["logs"][service])

        @mcp.tool()
        def service_owner(service: str) -> Owner:
            """Who owns a service, and the team."""
            return Owner(**d["owners"][service])

    return mcp


if __name__ == "__main__":
    server(sys.argv[1]).run("stdio")
