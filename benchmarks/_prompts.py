"""Prompt text the benchmarks share, written for them by the specplug authors (Apache-2.0)."""

# Two functions from an items file: embedded.py's code-rewrite file and server_ab.py's code-edit prompts.
ITEMS_CODE = '''def load_items(path):
    data = json.loads(Path(path).read_text())
    items = []
    for raw in data["items"]:
        if raw.get("skip"):
            continue
        items.append({"name": raw["name"], "price": float(raw["price"]), "qty": int(raw.get("qty", 1))})
    return items


def total(items):
    result = 0.0
    for item in items:
        result += item["price"] * item["qty"]
    return result
'''
