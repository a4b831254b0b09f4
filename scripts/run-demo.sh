#!/usr/bin/env bash
# Create .venv if needed, install, and run the built-in buggy model under the doctor.
source "$(dirname "$0")/_venv.sh"
exec msdoctor demo "$@"
