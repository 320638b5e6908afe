"""Compares two work directories of scripts/compare-runs.sh; exits 1 on any difference."""

import glob
import json
import os
import re
import sys

# Keys whose values differ from run to run by nature: times, bills, request counts, ids, URLs.
VARYING = re.compile(
    r"(_ms$|_s$|_usd$|unix|time|duration|elapsed|wall|bill|cost|pid|started|ended|heartbeat"
    r"|invocations|requests|job_id|run_url|data_url|model_url|dataset_id|seconds|_at$)"
)


def stable(value):
    """The value with every key that varies from run to run taken out."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if not VARYING.search(k)}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main(old, new):
    differences = []
    for name in ("lr.txt", "ratings.data", "blobs.txt"):
        if read(f"{old}/{name}") != read(f"{new}/{name}"):
            differences.append(f"generated {name}")
    for data in sorted(glob.glob(f"{old}/data/*")):
        name = os.path.basename(data)
        for root, _, files in os.walk(data):
            for file in files:
                rel = os.path.relpath(os.path.join(root, file), data)
                if rel in ("manifest.json", "prepare.json"):
                    continue
                other = os.path.join(new, "data", name, rel)
                if not os.path.exists(other) or read(os.path.join(data, rel)) != read(other):
                    differences.append(f"data {name}: {rel}")
        manifests = [json.load(open(f"{d}/data/{name}/manifest.json")) for d in (old, new)]
        for manifest in manifests:
            manifest.pop("dataset_id", None)
            manifest.pop("created_unix_s", None)
        if manifests[0] != manifests[1]:
            differences.append(f"data {name}: manifest.json")
    runs = sorted(glob.glob(f"{old}/runs-*"))
    for runs_dir in runs:
        name = os.path.basename(runs_dir)
        [old_run] = glob.glob(f"{runs_dir}/job-*")
        [new_run] = glob.glob(f"{new}/{name}/job-*")
        if read(f"{old_run}/model.bin") != read(f"{new_run}/model.bin"):
            differences.append(f"{name}: model.bin")
        records = [stable(json.load(open(f"{r}/record.json"))) for r in (old_run, new_run)]
        for key in sorted(set(records[0]) | set(records[1])):
            if records[0].get(key) != records[1].get(key):
                differences.append(f"{name}: record.json {key}")
    for difference in differences:
        print("differs:", difference)
    print(f"{len(runs)} runs and {len(glob.glob(f'{old}/data/*'))} data sets compared: "
          f"{len(differences)} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
