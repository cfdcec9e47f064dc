"""What the bench scripts share: running `rematlab-cli … --json` and reading its last line."""
import json
import subprocess


def last_json(command):
    """Runs `command` (a list) and returns the JSON object its last line of stdout holds."""
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])
