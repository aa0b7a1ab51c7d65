"""Seeded generation of the retail database: products with variants, users with payment methods, orders.

Everything is drawn from the ``rng`` handed in (the env's ``np_random``), in a fixed order, so one seed gives
one database byte for byte. Ids look like the customer-service benchmarks' (``#W1234567`` orders, ten-digit
product and item ids, ``first_last_1234`` users) and are unique within an instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from trace_gym.worlds import State

# name -> (option name -> values, base price). Option values are strings so that arguments stay exact.
CATALOG: dict[str, tuple[dict[str, list[str]], float]] = {
    "T-Shirt": ({"color": ["red", "blue", "black", "white", "green"], "size": ["S", "M", "L", "XL"]}, 25.0),
    "Running Shoes": (
        {
            "size": ["7", "8", "9", "10", "11"],
            "color": ["black", "white", "grey"],
            "material": ["mesh", "leather"],
        },
        95.0,
    ),
    "Water Bottle": (
        {
            "capacity": ["500ml", "750ml", "1000ml"],
            "material": ["plastic", "stainless steel", "glass"],
            "color": ["blue", "green", "black"],
        },
        22.0,
    ),
    "Desk Lamp": (
        {
            "color": ["black", "white", "silver"],
            "brightness": ["low", "medium", "high"],
            "power source": ["AC adapter", "USB", "battery"],
        },
        60.0,
    ),
    "Wireless Earbuds": (
        {
            "color": ["black", "white", "blue"],
            "battery life": ["4 hours", "6 hours", "8 hours"],
            "water resistance": ["IPX4", "IPX7", "none"],
        },
        120.0,
    ),
    "Backpack": (
        {
            "color": ["black", "navy", "grey", "green"],
            "size": ["small", "medium", "large"],
            "material": ["nylon", "polyester", "leather"],
        },
        70.0,
    ),
    "Coffee Maker": (
        {
            "color": ["black", "stainless steel", "white"],
            "capacity": ["1 cup", "4 cups", "8 cups", "12 cups"],
            "type": ["drip", "espresso", "french press"],
        },
        140.0,
    ),
    "Mechanical Keyboard": (
        {
            "switch type": ["linear", "tactile", "clicky"],
            "backlight": ["none", "white", "RGB"],
            "size": ["full size", "80%", "60%"],
        },
        110.0,
    ),
    "Yoga Mat": (
        {
            "thickness": ["4mm", "6mm", "8mm"],
            "material": ["PVC", "TPE", "natural rubber"],
            "color": ["purple", "blue", "pink", "black"],
        },
        35.0,
    ),
    "Smart Watch": (
        {
            "color": ["black", "silver", "gold"],
            "band material": ["silicone", "leather", "metal"],
            "display": ["LCD", "AMOLED"],
        },
        260.0,
    ),
    "Hiking Boots": (
        {
            "size": ["7", "8", "9", "10", "11", "12"],
            "material": ["leather", "synthetic"],
            "waterproof": ["yes", "no"],
        },
        150.0,
    ),
    "Jigsaw Puzzle": (
        {
            "pieces": ["500", "1000", "1500", "2000"],
            "theme": ["animals", "art", "fantasy", "landscape"],
            "difficulty level": ["beginner", "intermediate", "expert"],
        },
        30.0,
    ),
    "Electric Kettle": (
        {
            "capacity": ["1L", "1.5L", "2L"],
            "material": ["glass", "plastic", "stainless steel"],
            "color": ["white", "black", "silver"],
        },
        45.0,
    ),
    "Sunglasses": (
        {
            "frame color": ["black", "brown", "silver"],
            "lens color": ["green", "brown", "grey", "blue"],
            "lens type": ["polarized", "non-polarized"],
        },
        85.0,
    ),
    "Office Chair": (
        {
            "material": ["mesh", "leather", "fabric"],
            "color": ["black", "grey", "blue"],
            "armrest": ["fixed", "adjustable", "none"],
        },
        220.0,
    ),
    "Bluetooth Speaker": (
        {
            "color": ["black", "red", "blue"],
            "battery life": ["10 hours", "20 hours"],
            "water resistance": ["yes", "no"],
        },
        65.0,
    ),
    "Notebook": (
        {
            "size": ["A4", "A5"],
            "cover type": ["hard cover", "soft cover"],
            "paper": ["lined", "dotted", "blank"],
        },
        12.0,
    ),
}

FIRST_NAMES = [
    "Ava", "Liam", "Mia", "Noah", "Emma", "Omar", "Sofia", "Yusuf", "Isabella", "Mei", "Lucas", "Aisha",
    "Ethan", "Chen", "Harper", "Raj", "Olivia", "Mateo", "Fatima", "James", "Yara", "Daniel", "Ivan", "Lena",
    "Sara", "Mohamed", "Anya", "Juan", "Emily", "Kenji",
]  # fmt: skip
LAST_NAMES = [
    "Smith", "Garcia", "Kim", "Nguyen", "Patel", "Silva", "Johnson", "Brown", "Lopez", "Muller", "Rossi",
    "Ahmed", "Wilson", "Sato", "Ivanova", "Davis", "Moreno", "Khan", "Taylor", "Anderson", "Thomas",
    "Hernandez", "Lee", "Martin", "Clark", "Lewis", "Walker", "Young", "Hall", "Wright",
]  # fmt: skip
STREETS = [
    "Maple Drive", "Oak Street", "Pine Avenue", "Cedar Lane", "Elm Street", "Willow Way", "Lakeview Road",
    "Hillcrest Drive", "River Road", "Sunset Boulevard", "Park Avenue", "Main Street", "Chestnut Street",
    "Highland Avenue", "Spring Street", "Broadway",
]  # fmt: skip
CITIES = [
    ("Austin", "TX"), ("Denver", "CO"), ("Seattle", "WA"), ("Boston", "MA"), ("Chicago", "IL"),
    ("Phoenix", "AZ"), ("Portland", "OR"), ("Atlanta", "GA"), ("Columbus", "OH"), ("Charlotte", "NC"),
    ("San Diego", "CA"), ("Nashville", "TN"), ("Philadelphia", "PA"), ("Houston", "TX"), ("Fort Worth", "TX"),
    ("Jacksonville", "FL"),
]  # fmt: skip
ORDER_STATUSES = ("pending", "processed", "delivered", "cancelled")
CARD_BRANDS = ("visa", "mastercard", "amex")


@dataclass(frozen=True)
class Sizes:
    """Table sizes of one difficulty level."""

    products: int
    users: int
    orders_per_user: tuple[int, int]  # inclusive range for users other than the task's
    variants: tuple[int, int]


SIZES: dict[int, Sizes] = {
    1: Sizes(products=6, users=4, orders_per_user=(1, 2), variants=(4, 6)),
    2: Sizes(products=10, users=8, orders_per_user=(1, 3), variants=(5, 8)),
    3: Sizes(products=14, users=12, orders_per_user=(2, 4), variants=(6, 10)),
}


def money(value: float) -> float:
    """Round to cents; every amount in the database and in expected facts goes through this."""
    return round(float(value) + 0.0, 2)


class IdMaker:
    """Unique ids of one instance, drawn from the rng."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.used: set[str] = set()

    def digits(self, count: int, prefix: str = "") -> str:
        while True:
            value = prefix + "".join(map(str, self.rng.integers(0, 10, size=count).tolist()))
            if value[len(prefix)] != "0" and value not in self.used:
                self.used.add(value)
                return value


def pick(rng: np.random.Generator, values: list[Any] | tuple[Any, ...]) -> Any:
    return values[int(rng.integers(len(values)))]


def make_products(rng: np.random.Generator, ids: IdMaker, sizes: Sizes) -> dict[str, Any]:
    """Products with a random subset of their option combinations as variants (distinct prices)."""
    names = sorted(CATALOG)
    chosen = sorted(names[int(i)] for i in rng.choice(len(names), size=sizes.products, replace=False))
    products: dict[str, Any] = {}
    for name in chosen:
        options, base = CATALOG[name]
        combos = [{}]
        for key, values in options.items():
            combos = [dict(c, **{key: v}) for c in combos for v in values]
        count = min(len(combos), int(rng.integers(sizes.variants[0], sizes.variants[1] + 1)))
        product_id = ids.digits(10)
        variants: dict[str, Any] = {}
        prices: set[float] = set()
        for index in sorted(int(i) for i in rng.choice(len(combos), size=count, replace=False)):
            price = money(base * rng.uniform(0.8, 1.25))
            while price in prices:  # distinct prices keep every price difference non-zero
                price = money(price + 0.37)
            prices.add(price)
            item_id = ids.digits(10)
            variants[item_id] = {
                "item_id": item_id,
                "options": combos[index],
                "price": price,
                "available": bool(rng.random() < 0.8),
            }
        products[product_id] = {"product_id": product_id, "name": name, "variants": variants}
    return products


# Zip code ranges of each city's area (v1 on: a zip code matches its state; v0 drew any five digits).
ZIP_RANGES: dict[str, tuple[int, int]] = {
    "Austin": (78701, 78759), "Denver": (80201, 80239), "Seattle": (98101, 98199), "Boston": (2108, 2137),
    "Chicago": (60601, 60661), "Phoenix": (85001, 85054), "Portland": (97201, 97239),
    "Atlanta": (30301, 30349), "Columbus": (43201, 43240), "Charlotte": (28201, 28288),
    "San Diego": (92101, 92199), "Nashville": (37201, 37250), "Philadelphia": (19101, 19160),
    "Houston": (77001, 77099), "Fort Worth": (76101, 76199), "Jacksonville": (32099, 32290),
}  # fmt: skip


def make_address(rng: np.random.Generator, version: int = 0) -> dict[str, str]:
    city, state = pick(rng, CITIES)
    unit = f"Suite {int(rng.integers(100, 1000))}" if rng.random() < 0.4 else ""
    address1 = f"{int(rng.integers(10, 9999))} {pick(rng, STREETS)}"
    if version >= 1:
        low, high = ZIP_RANGES[city]
        zip_code = f"{int(rng.integers(low, high + 1)):05d}"
    else:
        zip_code = f"{int(rng.integers(10000, 99999)):05d}"
    return {
        "address1": address1,
        "address2": unit,
        "city": city,
        "state": state,
        "country": "USA",
        "zip": zip_code,
    }


def make_user(
    rng: np.random.Generator, ids: IdMaker, first: str, last: str, version: int = 0
) -> dict[str, Any]:
    number = ids.digits(4)
    user_id = f"{first.lower()}_{last.lower()}_{number}"
    methods: dict[str, Any] = {}
    sources = ["credit_card", "paypal", "gift_card"]
    count = int(rng.integers(1, 4))
    for index in sorted(int(i) for i in rng.choice(3, size=count, replace=False)):
        source = sources[index]
        method_id = f"{source}_{ids.digits(7)}"
        method: dict[str, Any] = {"id": method_id, "source": source}
        if source == "credit_card":
            method.update(brand=pick(rng, CARD_BRANDS), last_four=ids.digits(4))
        elif source == "gift_card":
            method["balance"] = money(rng.uniform(5, 400))
        methods[method_id] = method
    return {
        "user_id": user_id,
        "name": {"first_name": first, "last_name": last},
        "email": f"{first.lower()}.{last.lower()}{number}@example.com",
        "address": make_address(rng, version),
        "payment_methods": methods,
        "orders": [],
    }


def make_order(
    rng: np.random.Generator,
    ids: IdMaker,
    user: dict[str, Any],
    products: dict[str, Any],
    status: str,
    n_items: int,
) -> dict[str, Any]:
    """One order of distinct products (so a product name names one item of the order)."""
    product_ids = sorted(products)
    n_items = min(n_items, len(product_ids))
    items = []
    for index in rng.choice(len(product_ids), size=n_items, replace=False):
        product = products[product_ids[int(index)]]
        item_id = pick(rng, sorted(product["variants"]))
        variant = product["variants"][item_id]
        items.append(
            {
                "name": product["name"],
                "product_id": product["product_id"],
                "item_id": item_id,
                "price": variant["price"],
                "options": dict(variant["options"]),
            }
        )
    total = money(sum(item["price"] for item in items))
    method_id = pick(rng, sorted(user["payment_methods"]))
    history = [{"transaction_type": "payment", "amount": total, "payment_method_id": method_id}]
    if status == "cancelled":
        history.append({"transaction_type": "refund", "amount": total, "payment_method_id": method_id})
    order_id = "#W" + ids.digits(7)
    return {
        "order_id": order_id,
        "user_id": user["user_id"],
        "address": dict(user["address"]),
        "items": items,
        "status": status,
        "payment_history": history,
    }


def order_total(order: dict[str, Any]) -> float:
    return money(sum(item["price"] for item in order["items"]))


def make_database(rng: np.random.Generator, difficulty: int, version: int = 0) -> tuple[State, IdMaker]:
    """Products, users (unique names) and their orders, plus the id maker (tasks.py adds orders with it)."""
    sizes = SIZES[difficulty]
    ids = IdMaker(rng)
    products = make_products(rng, ids, sizes)
    firsts = rng.choice(len(FIRST_NAMES), size=sizes.users, replace=False)
    lasts = rng.choice(len(LAST_NAMES), size=sizes.users, replace=False)
    users: dict[str, Any] = {}
    orders: dict[str, Any] = {}
    for f, last in zip(firsts, lasts, strict=True):
        user = make_user(rng, ids, FIRST_NAMES[int(f)], LAST_NAMES[int(last)], version)
        users[user["user_id"]] = user
        low, high = sizes.orders_per_user
        for _ in range(int(rng.integers(low, high + 1))):
            status = pick(rng, ORDER_STATUSES)
            order = make_order(rng, ids, user, products, status, int(rng.integers(1, 4)))
            orders[order["order_id"]] = order
            user["orders"].append(order["order_id"])
    return {"users": users, "products": products, "orders": orders}, ids
