"""Does thinking help? Multi-step tasks with checkable end states, on the embedded model.

Every task runs twice on the embedded 1.5B model (``LocalModel``, in-process), in a fresh
workspace each time: ``plain`` (the ReAct loop) and ``thinking`` (``Thinking()``: the
planner and the reflector on, the router off). The tools are real and the same for every
task: ``file_tools`` over a temporary directory, ``sql_tool`` over a SQLite fixture (a shop's
employees, orders and products), ``calculate``, and ``kv_tools`` over a real SQLite file.
Each task needs 2 to 6 tool calls; some start from a misleading result (a file that says
it is outdated, amounts stored in cents, a deadline changed later), some need a fix after a
failed step (a guessed column that does not exist). Success is decided by a checker of the
end state (files written, key-value entries, the database), never by a model.

The router is measured on its own: for every task and for a few general-knowledge
questions, one routing decision with the tasks' tools (``router_direct``: tasks the router
would have answered without tools, which is a mistake here; ``router_direct_trivial``:
trivial questions it answered directly, out of ``router_trivial``).

Prints one JSON line: tasks, success_plain, success_thinking (percent), median_steps_plain,
median_steps_thinking, median_wall_s_plain, median_wall_s_thinking, median_requests_plain,
median_requests_thinking, router_direct, router_direct_trivial, router_trivial,
failed_plain, failed_thinking (task names). ``--only NAME`` (repeatable) and ``--limit N``
run fewer tasks; ``--modes`` picks the modes; ``-v`` prints each run to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import configparser
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether import Agent, RunOutcome
from tether.events import ToolCallFinished
from tether.jsontypes import JsonValue
from tether.limits import Limits
from tether.messages import ToolCall, UserMessage
from tether.models.base import Model, ModelRequest, ModelResponse
from tether.models.local import LocalModel
from tether.models.weights import DEFAULT_LOCAL_MODEL, KNOWN_MODELS, assemble
from tether.policy import AllowAll
from tether.stores import SqliteStore
from tether.testing import ScriptedModel, call, finish
from tether.thinking import ModelRouter, Thinking, ThinkingContext
from tether.tools.builtin import calculate, file_tools, kv_tools, sql_tool

INSTRUCTIONS = (
    "You complete tasks with tools. Work step by step: call one tool at a time and use what "
    "it returns. Paths are relative to the workspace root; the database is the shop's. When "
    "the task is done, call finish_task with a one-sentence summary."
)

FILES: dict[str, str] = {
    "notes/todo.txt": "# Todo\n- [x] buy milk\n- [ ] call the plumber\n- [ ] renew passport\n"
    "- [x] pay rent\n- [ ] book the dentist\n",
    "notes/deadline.txt": "Project Falcon\nDeadline: 2026-12-01\nOwner: Priya\n",
    "notes/changes.txt": "2026-11-02: scope reduced\n2026-11-10: Falcon deadline moved to "
    "2026-12-15\n",
    "docs/meeting_jan.txt": "January meeting. Priya presented the hiring plan. Next steps: "
    "office move.\n",
    "docs/meeting_feb.txt": "February meeting. The board approved the quarterly budget of "
    "48000 euros. Tom will book the offsite.\n",
    "docs/meeting_mar.txt": "March meeting. Priya reviewed the offsite feedback. No budget "
    "changes.\n",
    "config/default.ini": "[server]\nhost = 127.0.0.1\nport = 8080\n\n[log]\nlevel = info\n",
    "data/prices.csv": "item,price\npen,1.20\nnotebook,3.50\nstapler,7.25\nfolder,0.80\n",
    "status.txt": "This file is outdated and no longer maintained. The current status is "
    "in ops/status_current.txt.\n",
    "ops/status_current.txt": "status: degraded\nsince: 2026-11-20\n",
    "order.txt": "Order 1187\nproducts: P2, P5, P7\n",
    "thresholds.json": '{"min_salary": 52000}\n',
    "inventory/bolts.txt": "item: bolts\nqty: 120\n",
    "inventory/nuts.txt": "item: nuts\nqty: 340\n",
    "inventory/washers.txt": "item: washers\nqty: 75\n",
    "contacts.txt": "name, email, city\nAnna Berg, anna@example.com, Berlin\nLuis Ortega, "
    "luis@example.com, Madrid\nKai Weber, kai@example.com, Berlin\nSara Lind, "
    "sara@example.com, Oslo\n",
}

EMPLOYEES = [
    (1, "Mara Olsen", "Engineering", 68000, "2021-03-01"),
    (2, "Tom Berger", "Sales", 51000, "2024-02-15"),
    (3, "Priya Nair", "Engineering", 72000, "2019-07-01"),
    (4, "Jon Park", "Support", 43000, "2024-09-01"),
    (5, "Lena Vogel", "Sales", 57000, "2022-05-20"),
    (6, "Omar Haddad", "Engineering", 81000, "2018-01-10"),
    (7, "Eva Novak", "Support", 47000, "2023-11-01"),
    (8, "Rui Costa", "Sales", 49500, "2024-06-03"),
]
ORDERS = [  # amounts in cents
    (1, "Acme", 125000, "shipped"),
    (2, "Globex", 48050, "pending"),
    (3, "Acme", 9900, "shipped"),
    (4, "Initech", 230000, "cancelled"),
    (5, "Acme", 15500, "pending"),
    (6, "Globex", 77700, "shipped"),
    (7, "Umbrella", 3300, "shipped"),
]
PRODUCTS = [
    ("P1", "cable", 4.5),
    ("P2", "adapter", 12.0),
    ("P3", "mouse", 19.9),
    ("P4", "keyboard", 39.0),
    ("P5", "hub", 24.5),
    ("P6", "stand", 29.0),
    ("P7", "charger", 18.25),
    ("P8", "webcam", 54.0),
]
KV: dict[str, JsonValue] = {
    "budget": 5000,
    "price": 19.99,
    "qty": 3,
    "visits": 41,
    "draft": "Hello team, the offsite is on Friday.",
    "rate_usd_eur": 0.92,
    "cfg_a": 4,
    "cfg_b": 10,
    "cfg_c": 7.5,
    "other": 99,
}
NAMESPACE = "default"


@dataclass
class Env:
    """One task's workspace: files, the shop database, the key-value store."""

    root: Path
    db: Path
    kv: SqliteStore

    def text(self, path: str) -> str | None:
        try:
            return (self.root / path).read_text()
        except (OSError, UnicodeDecodeError):
            return None

    async def value(self, key: str) -> JsonValue | None:
        entry = await self.kv.kv_get(NAMESPACE, key)
        return None if entry is None else entry.value


def _make_db(path: Path) -> None:
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE employees (id INTEGER PRIMARY KEY, name TEXT, dept TEXT, salary INTEGER,"
        " hired TEXT);"
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, amount_cents INTEGER,"
        " status TEXT);"
        "CREATE TABLE products (id TEXT PRIMARY KEY, name TEXT, price REAL);"
    )
    db.executemany("INSERT INTO employees VALUES (?, ?, ?, ?, ?)", EMPLOYEES)
    db.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", ORDERS)
    db.executemany("INSERT INTO products VALUES (?, ?, ?)", PRODUCTS)
    db.commit()
    db.close()


async def make_env(base: Path) -> Env:
    root = base / "ws"
    for name, content in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    (root / "out").mkdir()
    db = base / "shop.db"
    _make_db(db)
    kv = SqliteStore(base / "kv.db")
    for key, value in KV.items():
        await kv.kv_set(NAMESPACE, key, value)
    return Env(root, db, kv)


def number(value: object) -> float | None:
    """A number from a value or a text like ``"12.75 euros"`` / ``"€1,250"``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        return None
    cleaned = value.strip().replace("€", "").replace("$", "").replace(",", "")
    for token in cleaned.split():
        try:
            return float(token)
        except ValueError:
            continue
    return None


def near(value: object, expected: float, tolerance: float = 0.011) -> bool:
    got = number(value)
    return got is not None and abs(got - expected) <= tolerance


def lines(text: str | None) -> set[str]:
    return {line.strip() for line in (text or "").splitlines() if line.strip()}


Check = Callable[[Env, RunOutcome[Any]], Awaitable[bool]]


@dataclass
class Task:
    name: str
    goal: str
    check: Check


def file_number(path: str, expected: float) -> Check:
    async def check(env: Env, _: RunOutcome[Any]) -> bool:
        return near(env.text(path), expected)

    return check


def file_word(path: str, expected: str) -> Check:
    async def check(env: Env, _: RunOutcome[Any]) -> bool:
        text = (env.text(path) or "").strip().strip(".").strip('"').lower()
        return text == expected.lower()

    return check


def file_name(path: str, expected: str) -> Check:
    """The file holds a path whose last part is ``expected`` (``docs/x.txt`` names x.txt)."""

    async def check(env: Env, _: RunOutcome[Any]) -> bool:
        text = (env.text(path) or "").strip().strip(".").strip('"')
        return text.replace("\\", "/").rsplit("/", 1)[-1] == expected

    return check


def file_lines(path: str, expected: set[str]) -> Check:
    async def check(env: Env, _: RunOutcome[Any]) -> bool:
        return lines(env.text(path)) == expected

    return check


def kv_number(key: str, expected: float, tolerance: float = 0.011) -> Check:
    async def check(env: Env, _: RunOutcome[Any]) -> bool:
        return near(await env.value(key), expected, tolerance)

    return check


def kv_word(key: str, expected: str) -> Check:
    async def check(env: Env, _: RunOutcome[Any]) -> bool:
        value = await env.value(key)
        return isinstance(value, str) and value.strip().lower() == expected.lower()

    return check


def both(*checks: Check) -> Check:
    async def check(env: Env, outcome: RunOutcome[Any]) -> bool:
        return all([await c(env, outcome) for c in checks])

    return check


async def _ini(env: Env, _: RunOutcome[Any]) -> bool:
    text = env.text("config/local.ini")
    if text is None:
        return False
    parser = configparser.ConfigParser()
    try:
        parser.read_string(text)
    except configparser.Error:
        return False
    got = {s: dict(parser[s]) for s in parser.sections()}
    return got == {"server": {"host": "127.0.0.1", "port": "9090"}, "log": {"level": "info"}}


async def _moved(env: Env, _: RunOutcome[Any]) -> bool:
    return await env.value("final") == KV["draft"] and await env.value("draft") is None


async def _departments(env: Env, _: RunOutcome[Any]) -> bool:
    value = await env.value("departments")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return False
    return value == ["Engineering", "Sales", "Support"]


async def _report(env: Env, _: RunOutcome[Any]) -> bool:
    try:
        report = json.loads(env.text("out/report.json") or "")
    except ValueError:
        return False
    return (
        isinstance(report, dict)
        and near(report.get("employees"), len(EMPLOYEES))
        and near(report.get("payroll"), sum(e[3] for e in EMPLOYEES))
    )


async def _prices_fixed(env: Env, _: RunOutcome[Any]) -> bool:
    rows = lines(env.text("data/prices.csv"))
    want = {"item,price", "pen,1.20", "notebook,3.50", "stapler,6.75", "folder,0.80"}
    return rows == want and near(await env.value("prices_total"), 12.25)


TASKS: list[Task] = [
    Task(
        "todo_open",
        "Count the open items (the lines starting with '- [ ]') in notes/todo.txt and write "
        "the count to out/open_count.txt.",
        file_number("out/open_count.txt", 3),
    ),
    Task(
        "budget_file",
        "Which file in docs/ mentions the quarterly budget? Write its file name (like "
        "meeting_x.txt) to out/budget_file.txt.",
        file_name("out/budget_file.txt", "meeting_feb.txt"),
    ),
    Task(
        "budget_amount",
        "Find the quarterly budget amount in the meeting notes in docs/ and store it as a "
        "number in the key-value key 'q_budget'.",
        kv_number("q_budget", 48000),
    ),
    Task(
        "ini_copy",
        "Create config/local.ini as a copy of config/default.ini with the port changed to "
        "9090 (everything else the same).",
        _ini,
    ),
    Task(
        "prices_total",
        "Add up the price column of data/prices.csv and write the total to out/total.txt.",
        file_number("out/total.txt", 12.75),
    ),
    Task(
        "status_moved",
        "What is the service's current status? Start with status.txt. Write just the status "
        "word to out/status.txt.",
        file_word("out/status.txt", "degraded"),
    ),
    Task(
        "eng_count",
        "How many employees work in the Engineering department? Store the number in the "
        "key-value key 'eng_count'.",
        kv_number("eng_count", 3),
    ),
    Task(
        "top_paid",
        "Write the name of the highest-paid employee to out/top.txt.",
        file_word("out/top.txt", "Omar Haddad"),
    ),
    Task(
        "shipped_euros",
        "What is the total amount, in euros, of the orders with status 'shipped'? Write the "
        "number to out/shipped.txt.",
        file_number("out/shipped.txt", (125000 + 9900 + 77700 + 3300) / 100),
    ),
    Task(
        "sales_avg",
        "Store the average salary of the Sales department, rounded to a whole number, in the "
        "key-value key 'sales_avg'.",
        kv_number("sales_avg", round((51000 + 57000 + 49500) / 3), 1.0),
    ),
    Task(
        "top_customer",
        "Which customer placed the most orders? Store the customer's name in the key-value "
        "key 'top_customer'.",
        kv_word("top_customer", "Acme"),
    ),
    Task(
        "remaining",
        "The key-value key 'budget' holds a budget in euros. Subtract an expense of 1250 "
        "euros and store what remains in the key 'remaining'.",
        kv_number("remaining", 3750),
    ),
    Task(
        "tax_total",
        "The key-value keys 'price' and 'qty' hold a unit price and a quantity. Store the "
        "total with 8% tax added, rounded to 2 decimals, in the key 'total'.",
        kv_number("total", round(19.99 * 3 * 1.08, 2)),
    ),
    Task(
        "visits",
        "Increase the counter in the key-value key 'visits' by 5.",
        kv_number("visits", 46),
    ),
    Task(
        "draft_move",
        "Move the value of the key-value key 'draft' to the key 'final' (the same text) and "
        "delete 'draft'.",
        _moved,
    ),
    Task(
        "order_total",
        "order.txt lists product ids. Look up each product's price in the products table "
        "and write the order's total price to out/order_total.txt.",
        file_number("out/order_total.txt", 12.0 + 24.5 + 18.25),
    ),
    Task(
        "count_both",
        "Count the rows of the orders table; store the count in the key-value key "
        "'order_count' and also write it to out/order_count.txt.",
        both(kv_number("order_count", 7), file_number("out/order_count.txt", 7)),
    ),
    Task(
        "low_salary",
        "thresholds.json holds min_salary. Write the names of the employees whose salary is "
        "below it to out/low.txt, one per line.",
        file_lines("out/low.txt", {"Tom Berger", "Jon Park", "Eva Novak", "Rui Costa"}),
    ),
    Task(
        "inventory_sum",
        "Each file in inventory/ has a line 'qty: N'. Store the total quantity over all of "
        "those files in the key-value key 'inventory_total'.",
        kv_number("inventory_total", 120 + 340 + 75),
    ),
    Task(
        "berlin_emails",
        "Write the email addresses of the contacts in Berlin (contacts.txt) to "
        "out/berlin.txt, one per line.",
        file_lines("out/berlin.txt", {"anna@example.com", "kai@example.com"}),
    ),
    Task(
        "usd_convert",
        "The key-value key 'rate_usd_eur' holds how many euros one US dollar buys. Convert "
        "the total of the price column of data/prices.csv (euros) to US dollars, rounded to "
        "2 decimals, and store it in the key 'total_usd'.",
        kv_number("total_usd", round(12.75 / 0.92, 2)),
    ),
    Task(
        "departments",
        "Store the distinct department names of the employees table, sorted alphabetically, "
        "as a JSON array in the key-value key 'departments'.",
        _departments,
    ),
    Task(
        "mara_dept",
        "In which department does Mara Olsen work? Write the department's name to out/mara.txt.",
        file_word("out/mara.txt", "Engineering"),
    ),
    Task(
        "pending_count",
        "How many orders are pending? Store the count in the key-value key 'pending'.",
        kv_number("pending", 2),
    ),
    Task(
        "largest_order",
        "Write the customer of the largest single order to out/largest.txt.",
        file_word("out/largest.txt", "Initech"),
    ),
    Task(
        "cfg_count",
        "How many key-value keys start with 'cfg_'? Write the count to out/cfg_count.txt.",
        file_number("out/cfg_count.txt", 3),
    ),
    Task(
        "cfg_sum",
        "The key-value keys starting with 'cfg_' hold numbers. Store their sum in the key "
        "'cfg_sum'.",
        kv_number("cfg_sum", 21.5),
    ),
    Task(
        "mara_raise",
        "Mara Olsen gets a 6% raise. Compute her new salary from the employees table and "
        "store it, rounded to a whole number, in the key-value key 'mara_new_salary'.",
        kv_number("mara_new_salary", round(68000 * 1.06), 1.0),
    ),
    Task(
        "report_json",
        "Write out/report.json: a JSON object with the keys 'employees' (the number of "
        "employees) and 'payroll' (the sum of all their salaries), from the database.",
        _report,
    ),
    Task(
        "priya_files",
        "How many files in docs/ mention Priya? Write the count to out/priya.txt.",
        file_number("out/priya.txt", 2),
    ),
    Task(
        "deadline",
        "notes/deadline.txt gives project Falcon's deadline, and notes/changes.txt records "
        "later changes. Write the deadline in force (YYYY-MM-DD) to out/deadline.txt.",
        file_word("out/deadline.txt", "2026-12-15"),
    ),
    Task(
        "price_fix",
        "In data/prices.csv the stapler's price is wrong: it is 6.75. Fix that line (keep "
        "the rest of the file as it is) and store the new total of the price column in the "
        "key-value key 'prices_total'.",
        _prices_fixed,
    ),
    Task(
        "payroll_2024",
        "Store the total salary of the employees hired in 2024 in the key-value key "
        "'payroll_2024'.",
        kv_number("payroll_2024", 51000 + 43000 + 49500),
    ),
]


def _sql(query: str) -> ToolCall:
    return call("sql_query", query=query)


def _write(path: str, content: str) -> ToolCall:
    return call("write_file", path=path, content=content)


def _set(key: str, value: JsonValue) -> ToolCall:
    return call("kv_set", key=key, value=value)


ORACLE: dict[str, list[ToolCall]] = {
    "todo_open": [call("read_file", path="notes/todo.txt"), _write("out/open_count.txt", "3")],
    "budget_file": [
        call("search_files", pattern="quarterly budget", path="docs"),
        _write("out/budget_file.txt", "meeting_feb.txt"),
    ],
    "budget_amount": [call("search_files", pattern="budget", path="docs"), _set("q_budget", 48000)],
    "ini_copy": [
        call("read_file", path="config/default.ini"),
        _write(
            "config/local.ini",
            "[server]\nhost = 127.0.0.1\nport = 9090\n\n[log]\nlevel = info\n",
        ),
    ],
    "prices_total": [
        call("read_file", path="data/prices.csv"),
        call("calculate", expression="1.20 + 3.50 + 7.25 + 0.80"),
        _write("out/total.txt", "12.75"),
    ],
    "status_moved": [
        call("read_file", path="status.txt"),
        call("read_file", path="ops/status_current.txt"),
        _write("out/status.txt", "degraded"),
    ],
    "eng_count": [
        _sql("SELECT COUNT(*) FROM employees WHERE dept = 'Engineering'"),
        _set("eng_count", 3),
    ],
    "top_paid": [
        _sql("SELECT name FROM employees ORDER BY salary DESC LIMIT 1"),
        _write("out/top.txt", "Omar Haddad"),
    ],
    "shipped_euros": [
        _sql("SELECT SUM(amount_cents) / 100.0 FROM orders WHERE status = 'shipped'"),
        _write("out/shipped.txt", "2159"),
    ],
    "sales_avg": [
        _sql("SELECT AVG(salary) FROM employees WHERE dept = 'Sales'"),
        _set("sales_avg", 52500),
    ],
    "top_customer": [
        _sql("SELECT customer, COUNT(*) AS n FROM orders GROUP BY customer ORDER BY n DESC"),
        _set("top_customer", "Acme"),
    ],
    "remaining": [
        call("kv_get", key="budget"),
        call("calculate", expression="5000 - 1250"),
        _set("remaining", 3750),
    ],
    "tax_total": [
        call("kv_get", key="price"),
        call("kv_get", key="qty"),
        call("calculate", expression="19.99 * 3 * 1.08"),
        _set("total", 64.77),
    ],
    "visits": [call("kv_get", key="visits"), _set("visits", 46)],
    "draft_move": [
        call("kv_get", key="draft"),
        _set("final", "Hello team, the offsite is on Friday."),
        call("kv_delete", key="draft"),
    ],
    "order_total": [
        call("read_file", path="order.txt"),
        _sql("SELECT SUM(price) FROM products WHERE id IN ('P2', 'P5', 'P7')"),
        _write("out/order_total.txt", "54.75"),
    ],
    "count_both": [
        _sql("SELECT COUNT(*) FROM orders"),
        _set("order_count", 7),
        _write("out/order_count.txt", "7"),
    ],
    "low_salary": [
        call("read_file", path="thresholds.json"),
        _sql("SELECT name FROM employees WHERE salary < 52000"),
        _write("out/low.txt", "Tom Berger\nJon Park\nEva Novak\nRui Costa\n"),
    ],
    "inventory_sum": [
        call("list_files", path="inventory"),
        call("search_files", pattern="qty:", path="inventory"),
        call("calculate", expression="120 + 340 + 75"),
        _set("inventory_total", 535),
    ],
    "berlin_emails": [
        call("read_file", path="contacts.txt"),
        _write("out/berlin.txt", "anna@example.com\nkai@example.com\n"),
    ],
    "usd_convert": [
        call("kv_get", key="rate_usd_eur"),
        call("read_file", path="data/prices.csv"),
        call("calculate", expression="12.75 / 0.92"),
        _set("total_usd", 13.86),
    ],
    "departments": [
        _sql("SELECT DISTINCT dept FROM employees ORDER BY dept"),
        _set("departments", ["Engineering", "Sales", "Support"]),
    ],
    "mara_dept": [
        _sql("SELECT dept FROM employees WHERE name = 'Mara Olsen'"),
        _write("out/mara.txt", "Engineering"),
    ],
    "pending_count": [
        _sql("SELECT COUNT(*) FROM orders WHERE status = 'pending'"),
        _set("pending", 2),
    ],
    "largest_order": [
        _sql("SELECT customer FROM orders ORDER BY amount_cents DESC LIMIT 1"),
        _write("out/largest.txt", "Initech"),
    ],
    "cfg_count": [call("kv_list", prefix="cfg_"), _write("out/cfg_count.txt", "3")],
    "cfg_sum": [
        call("kv_list", prefix="cfg_"),
        call("kv_get", key="cfg_a"),
        call("kv_get", key="cfg_b"),
        call("kv_get", key="cfg_c"),
        call("calculate", expression="4 + 10 + 7.5"),
        _set("cfg_sum", 21.5),
    ],
    "mara_raise": [
        _sql("SELECT salary FROM employees WHERE name = 'Mara Olsen'"),
        call("calculate", expression="68000 * 1.06"),
        _set("mara_new_salary", 72080),
    ],
    "report_json": [
        _sql("SELECT COUNT(*), SUM(salary) FROM employees"),
        _write("out/report.json", '{"employees": 8, "payroll": 468500}'),
    ],
    "priya_files": [
        call("search_files", pattern="Priya", path="docs"),
        _write("out/priya.txt", "2"),
    ],
    "deadline": [
        call("read_file", path="notes/deadline.txt"),
        call("read_file", path="notes/changes.txt"),
        _write("out/deadline.txt", "2026-12-15"),
    ],
    "price_fix": [
        call("read_file", path="data/prices.csv"),
        _write(
            "data/prices.csv", "item,price\npen,1.20\nnotebook,3.50\nstapler,6.75\nfolder,0.80\n"
        ),
        call("calculate", expression="1.20 + 3.50 + 6.75 + 0.80"),
        _set("prices_total", 12.25),
    ],
    "payroll_2024": [
        _sql("SELECT hire_year FROM employees"),  # a guessed column: the error shows the fix
        _sql("SELECT SUM(salary) FROM employees WHERE hired LIKE '2024-%'"),
        _set("payroll_2024", 143500),
    ],
}
"""For ``--self-check``: calls that do each task, so its checker is shown to pass."""


TRIVIAL = [
    "What is the capital of France?",
    "Write a haiku about autumn.",
    "What does the acronym CPU stand for?",
    "Translate 'good morning' into Spanish.",
    "Name the three primary colors.",
]


def tools_for(env: Env) -> list[Any]:
    return [
        *file_tools(env.root, trusted=True),
        sql_tool(env.db),
        calculate,
        *kv_tools(env.kv, namespace=NAMESPACE),
    ]


@dataclass
class Result:
    ok: bool
    steps: int
    requests: int
    wall_s: float
    status: str


def agent_for(
    env: Env, model: Model, name: str, thinking: bool, log_dir: Path | None = None
) -> Agent[str]:
    return Agent(
        name=f"task-{name}",
        instructions=INSTRUCTIONS,
        model=model,
        tools=tools_for(env),
        policy=AllowAll(),
        limits=Limits(max_steps=12, max_seconds=420.0),
        thinking=Thinking() if thinking else None,
        log_dir=log_dir,
    )


async def self_check(tasks: list[Task]) -> list[str]:
    """What is wrong with the tasks: a checker that passes untouched, or fails when done."""
    problems: list[str] = []
    for task in tasks:
        with tempfile.TemporaryDirectory(prefix="tether-task-") as tmp:
            env = await make_env(Path(tmp))
            try:
                untouched = agent_for(env, ScriptedModel([finish("nothing")]), task.name, False)
                outcome = await untouched.run(task.goal)
                if await task.check(env, outcome):
                    problems.append(f"{task.name}: passes with nothing done")
                script = [*ORACLE[task.name], finish("done")]
                done = await agent_for(env, ScriptedModel(script), task.name, False).run(task.goal)
                failed = [
                    f"{e.tool}: {e.error_type}"
                    for e in done.events
                    if isinstance(e, ToolCallFinished) and e.is_error
                ]
                expected_errors = 1 if task.name == "payroll_2024" else 0
                if len(failed) != expected_errors:
                    problems.append(f"{task.name}: the oracle's calls failed: {failed}")
                if done.status != "finished" or not await task.check(env, done):
                    problems.append(f"{task.name}: fails when done ({done.status})")
            finally:
                await env.kv.close()
    return problems


async def run_task(
    model: LocalModel, task: Task, thinking: bool, verbose: bool, log_dir: Path | None
) -> Result:
    with tempfile.TemporaryDirectory(prefix="tether-task-") as tmp:
        env = await make_env(Path(tmp))
        try:
            mode = "thinking" if thinking else "plain"
            logs = None if log_dir is None else log_dir / f"{task.name}-{mode}"
            if logs is not None:
                logs.mkdir(parents=True, exist_ok=True)
            agent = agent_for(env, model, task.name, thinking, logs)
            started = time.perf_counter()
            outcome = await agent.run(task.goal)
            wall = time.perf_counter() - started
            ok = await task.check(env, outcome)
        finally:
            await env.kv.close()
    result = Result(ok, outcome.steps, outcome.usage.requests, wall, outcome.status)
    if verbose:
        mode = "thinking" if thinking else "plain"
        print(
            f"{task.name:15} {mode:8} ok={ok!s:5} {outcome.status:16} steps={outcome.steps:2} "
            f"requests={outcome.usage.requests:2} {wall:6.1f}s answer={outcome.answer!r:.80}",
            file=sys.stderr,
            flush=True,
        )
    return result


async def route_once(model: LocalModel, goal: str, tools: list[Any]) -> bool:
    """Whether the default router answers ``goal`` directly, with the tasks' tools."""

    async def ask(request: ModelRequest) -> ModelResponse | None:
        return await model.request(request)

    context = ThinkingContext(
        goal=goal,
        instructions=INSTRUCTIONS,
        messages=(UserMessage(text=goal),),
        tools=tuple(t.definition for t in tools),
        plan=None,
        ask=ask,
    )
    route = await ModelRouter().route(context)
    return route is not None and route.direct


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 2) if values else 0.0


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="run this task (repeat)")
    parser.add_argument("--limit", type=int, default=None, help="run the first N tasks")
    parser.add_argument(
        "--modes", default="plain,thinking,router", help="comma-separated: plain,thinking,router"
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--log-dir", type=Path, default=None, help="keep each run's JSONL log")
    parser.add_argument(
        "--self-check",
        action="store_true",
        help="no model: check each task's checker against nothing done and a scripted solution",
    )
    args = parser.parse_args()
    if args.self_check:
        problems = await self_check(TASKS)
        print(json.dumps({"tasks": len(TASKS), "problems": problems}), flush=True)
        raise SystemExit(1 if problems else 0)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    tasks = [t for t in TASKS if not args.only or t.name in args.only][: args.limit]
    modes = set(args.modes.split(","))
    model = LocalModel(assemble(KNOWN_MODELS[DEFAULT_LOCAL_MODEL]), context=8192)
    results: dict[str, list[tuple[Task, Result]]] = {"plain": [], "thinking": []}
    for task in tasks:  # interleaved: a slower stretch of the machine hits both modes
        for mode in ("plain", "thinking"):
            if mode in modes:
                results[mode].append(
                    (
                        task,
                        await run_task(model, task, mode == "thinking", args.verbose, args.log_dir),
                    )
                )
    line: dict[str, Any] = {"tasks": len(tasks)}
    for mode, runs in results.items():
        if mode not in modes:
            continue
        line[f"success_{mode}"] = round(100 * sum(r.ok for _, r in runs) / max(len(runs), 1), 1)
        line[f"median_steps_{mode}"] = _median([r.steps for _, r in runs])
        line[f"median_requests_{mode}"] = _median([r.requests for _, r in runs])
        line[f"median_wall_s_{mode}"] = _median([r.wall_s for _, r in runs])
        line[f"failed_{mode}"] = [t.name for t, r in runs if not r.ok]
    if "router" in modes:
        with tempfile.TemporaryDirectory(prefix="tether-route-") as tmp:
            env = await make_env(Path(tmp))
            try:
                tools = tools_for(env)
                line["router_direct"] = sum([await route_once(model, t.goal, tools) for t in tasks])
                line["router_direct_trivial"] = sum(
                    [await route_once(model, g, tools) for g in TRIVIAL]
                )
                line["router_trivial"] = len(TRIVIAL)
            finally:
                await env.kv.close()
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
