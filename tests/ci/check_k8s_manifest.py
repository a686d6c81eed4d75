"""Checks ci/k8s/kvgate-indexed-job.yaml without a cluster (there is none in CI).

  check_k8s_manifest.py MANIFEST

1. Structure, schema-free: the volume claim, an Indexed Job of N shards and a merge Job, with the
   shard count equal in completions, parallelism and every KVGATE_SHARD_COUNT, every volume mount
   backed by a volume of the pod, both Jobs on the one claim at one mount path.
2. The containers' shell scripts, run with /bin/sh as the pods would run them: the volume is a
   temporary folder, kvgate a recorder. Every index writes its shard, a finished index run again
   does nothing, the merge's wait ends once all shards are done and the merge names the N shard
   databases in order.
3. Self-test: manifests broken in the ways a hand edit breaks them must fail step 1.
Exit 0 when all hold, 1 otherwise (each problem on its own line).
"""
import copy
import os
import stat
import subprocess
import sys
import tempfile

import yaml


def pod_containers(job):
    spec = job["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec.get("containers", [])


def env_value(container, name):
    for entry in container.get("env", []):
        if entry.get("name") == name:
            return entry.get("value")
    return None


def find_jobs(docs):
    jobs = [d for d in docs if d.get("kind") == "Job"]
    indexed = [j for j in jobs if j["spec"].get("completionMode") == "Indexed"]
    others = [j for j in jobs if j["spec"].get("completionMode") != "Indexed"]
    return indexed, others


def structure_problems(docs):
    problems = []
    claims = [d for d in docs if d.get("kind") == "PersistentVolumeClaim"]
    indexed, others = find_jobs(docs)
    if len(claims) != 1 or len(indexed) != 1 or len(others) != 1:
        return [f"want 1 PersistentVolumeClaim, 1 Indexed Job, 1 merge Job; found {len(claims)}, "
                f"{len(indexed)}, {len(others)}"]
    claim, shards, merge = claims[0], indexed[0], others[0]
    for doc in docs:
        if not doc.get("apiVersion") or not doc.get("metadata", {}).get("name"):
            problems.append(f"a {doc.get('kind')} lacks apiVersion or metadata.name")
    if "ReadWriteMany" not in claim["spec"].get("accessModes", []):
        problems.append("the claim is not ReadWriteMany: shard pods on several nodes write to it")

    count = shards["spec"].get("completions")
    if not isinstance(count, int) or count < 1:
        return problems + ["the Indexed Job's completions is not a positive integer"]
    if shards["spec"].get("parallelism") != count:
        problems.append(f"parallelism {shards['spec'].get('parallelism')} != completions {count}")
    for job in (shards, merge):
        name = job["metadata"]["name"]
        pod = job["spec"]["template"]["spec"]
        if pod.get("restartPolicy") not in ("Never", "OnFailure"):
            problems.append(f"{name}: a Job's pods need restartPolicy Never or OnFailure")
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in pod_containers(job):
            where = f"{name}/{container['name']}"
            value = env_value(container, "KVGATE_SHARD_COUNT")
            if value != str(count):
                problems.append(f"{where}: KVGATE_SHARD_COUNT is {value!r}, completions is {count}")
            mounts = container.get("volumeMounts", [])
            if [m.get("mountPath") for m in mounts] != ["/shards"]:
                problems.append(f"{where}: must mount the shards volume at /shards, and only it")
            for mount in mounts:
                volume = volumes.get(mount.get("name"))
                if volume is None:
                    problems.append(f"{where}: mounts '{mount.get('name')}', not a volume of the pod")
                elif volume.get("persistentVolumeClaim", {}).get("claimName") != claim["metadata"]["name"]:
                    problems.append(f"{where}: volume '{mount['name']}' is not the claim "
                                    f"{claim['metadata']['name']}")
    shard_script = "\n".join(shards["spec"]["template"]["spec"]["containers"][0].get("args", []))
    for needed in ("JOB_COMPLETION_INDEX", "kvgate ", "--db", "--threads", ".done"):
        if needed not in shard_script:
            problems.append(f"the shard command lacks {needed!r}")
    merge_script = "\n".join(merge["spec"]["template"]["spec"]["containers"][0].get("args", []))
    if "kvgate runs merge" not in merge_script:
        problems.append("the merge command does not run kvgate runs merge")
    if not merge["spec"]["template"]["spec"].get("initContainers"):
        problems.append("the merge Job has no init container waiting for the shards")
    return problems


RECORDER = """#!/bin/sh
# kvgate in the simulated pods: appends its argv to $RECORD; eval writes the database it was
# given, which must not exist yet (a leftover would hold a failed attempt's unfinished run).
echo "$*" >> "$RECORD"
prev=""
for arg in "$@"; do
  if [ "$prev" = "--db" ] && [ "$1" = eval ]; then
    if [ -e "$arg" ]; then echo "$arg: left over from an earlier attempt" >&2; exit 3; fi
    echo "shard $JOB_COMPLETION_INDEX" > "$arg"
  fi
  prev="$arg"
done
if [ "$1 $2" = "runs merge" ]; then : > "$3"; fi
"""


def run_script(container, volume, bin_dir, record, extra_env):
    script = "\n".join(container["args"]).replace("/shards", volume)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RECORD": record,
           "KVGATE_SHARD_COUNT": env_value(container, "KVGATE_SHARD_COUNT")}
    env.update(extra_env)
    command = container["command"] + [script]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=20)


def script_problems(docs):
    problems = []
    indexed, others = find_jobs(docs)
    shards, merge = indexed[0], others[0]
    count = shards["spec"]["completions"]
    with tempfile.TemporaryDirectory() as tmp:
        volume, bin_dir, record = f"{tmp}/shards", f"{tmp}/bin", f"{tmp}/record"
        os.makedirs(volume)
        os.makedirs(bin_dir)
        with open(f"{bin_dir}/kvgate", "w") as f:
            f.write(RECORDER)
        os.chmod(f"{bin_dir}/kvgate", stat.S_IRWXU)
        open(record, "w").close()
        shard = shards["spec"]["template"]["spec"]["containers"][0]
        # A failed attempt's leftovers must not survive into the retry.
        with open(f"{volume}/shard-0.db", "w") as f:
            f.write("unfinished")
        for index in list(range(count)) + [0]:
            result = run_script(shard, volume, bin_dir, record, {"JOB_COMPLETION_INDEX": str(index)})
            if result.returncode != 0:
                problems.append(f"shard {index}'s script failed: {result.stderr.strip()}")
        with open(record) as f:
            calls = f.read().splitlines()
        if len(calls) != count:
            problems.append(f"{len(calls)} kvgate calls for {count} shards (a done shard ran again?)")
        for index in range(count):
            with open(f"{volume}/shard-{index}.db") as f:
                if f.read().strip() != f"shard {index}":
                    problems.append(f"shard-{index}.db does not hold shard {index}'s run")
            if not os.path.exists(f"{volume}/shard-{index}.db.done"):
                problems.append(f"shard {index} left no .done file")
        open(record, "w").close()
        waiter = merge["spec"]["template"]["spec"]["initContainers"][0]
        try:
            result = run_script(waiter, volume, bin_dir, record, {})
            if result.returncode != 0:
                problems.append(f"the merge's wait failed: {result.stderr.strip()}")
        except subprocess.TimeoutExpired:
            problems.append("the merge's wait did not end with every shard done")
        result = run_script(merge["spec"]["template"]["spec"]["containers"][0], volume, bin_dir,
                            record, {})
        if result.returncode != 0:
            problems.append(f"the merge's script failed: {result.stderr.strip()}")
        with open(record) as f:
            calls = f.read().splitlines()
        want = "runs merge " + " ".join([f"{volume}/merged.db"] +
                                        [f"{volume}/shard-{i}.db" for i in range(count)])
        if not calls or calls[0] != want:
            problems.append(f"the merge ran {calls[:1]}, want [{want!r}]")
    return problems


def broken_manifests(docs):
    """Yields (what was broken, manifest) pairs that structure_problems must reject."""
    def edited(what, edit):
        copy_docs = copy.deepcopy(docs)
        indexed, others = find_jobs(copy_docs)
        edit(copy_docs, indexed[0], others[0])
        return what, copy_docs

    yield edited("completions changed alone",
                 lambda d, s, m: s["spec"].update(completions=s["spec"]["completions"] + 1))
    yield edited("parallelism differs", lambda d, s, m: s["spec"].update(parallelism=1))
    yield edited("merge count differs",
                 lambda d, s, m: m["spec"]["template"]["spec"]["containers"][0]["env"][0].update(value="9"))
    yield edited("claim renamed", lambda d, s, m: d[0]["metadata"].update(name="other"))
    yield edited("mount of a missing volume",
                 lambda d, s, m: s["spec"]["template"]["spec"].update(volumes=[]))
    yield edited("not Indexed", lambda d, s, m: s["spec"].pop("completionMode"))
    yield edited("no wait before the merge",
                 lambda d, s, m: m["spec"]["template"]["spec"].pop("initContainers"))
    yield edited("ReadWriteOnce claim", lambda d, s, m: d[0]["spec"].update(accessModes=["ReadWriteOnce"]))


def main():
    with open(sys.argv[1]) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    problems = structure_problems(docs)
    if not problems:
        problems += script_problems(docs)
    for what, manifest in broken_manifests(docs):
        if not structure_problems(manifest):
            problems.append(f"self-test: a manifest with '{what}' passed the structure check")
    for problem in problems:
        print(f"{sys.argv[1]}: {problem}")
    if problems:
        return 1
    print(f"{sys.argv[1]}: structure, pod scripts and {len(list(broken_manifests(docs)))} "
          "self-test edits ok (no cluster here: the API server's own validation is not run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
