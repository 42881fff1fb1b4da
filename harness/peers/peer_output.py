"""What the peer scripts share: table cells and the JSON/CSV files they
write (rows are dicts; CSV columns in `fields` order). Imported from the
scripts' own folder, which Python puts on the path when it runs them."""
import csv
import json


def fmt(v, spec):
    """A number in `spec`, or '-' for a point that has none (skipped, OOM)."""
    return format(v, spec) if isinstance(v, (int, float)) else "-"


def write(rows, fields, json_path, csv_path):
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)
    if csv_path:
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)
