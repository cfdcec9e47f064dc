#!/usr/bin/env bash
# Writes rematlab-cli(1) from the program's own --help and each subcommand's --help, so the man
# page cannot drift from the options; only the sections --help has no room for (exit status,
# environment, files, examples) are written here. The build runs it (packaging/CMakeLists.txt).
#   packaging/cli-manpage.sh BUILD/app/rematlab-cli VERSION OUTPUT.1.gz
set -euo pipefail
cli="$1"
version="$2"
output="$3"

# Defaults that name the build machine's home (the default database) must read "~" instead.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
help_of() {
  env -u XDG_DATA_HOME -u REMATLAB_DB HOME="$scratch" LC_ALL=C.UTF-8 "$cli" "$@" --help |
    sed "s|$scratch|~|g"
}

# One subcommand's CLI11 --help as roff: its first line is prose, "Usage:" the synopsis, then
# sections ("Positionals:", "Options:") of "  NAME TYPE   description" rows. A row whose name is
# wider than the column carries its description on the next, indented line.
roff_subcommand() {
  awk '
    function text(s) { gsub(/\\/, "\\e", s); if (s ~ /^[.'\'']/) s = "\\&" s; return s }
    function option(s) { s = text(s); gsub(/-/, "\\-", s); return s }
    function flush() {
      if (name != "") { print ".TP"; print "\\fB" name "\\fR"; if (about != "") print about }
      name = ""; about = ""
    }
    NR == 1 { print text($0); next }
    /^Usage: / { flush(); sub(/^Usage: /, ""); print ".PP"; print "\\fB" option($0) "\\fR"; next }
    /^[A-Z][A-Za-z]*:$/ { flush(); sub(/:$/, ""); print ".PP"; print "\\fI" $0 "\\fR"; next }
    /^  [^ ]/ {
      flush()
      row = substr($0, 3)
      if (row ~ /^(-h,--help|--help-all) /) next  # every subcommand has them: in the synopsis
      if (match(row, /  +/)) {
        name = option(substr(row, 1, RSTART - 1)); about = text(substr(row, RSTART + RLENGTH))
      } else {
        name = option(row)
      }
      next
    }
    /^ +[^ ]/ { sub(/^ +/, ""); about = (about == "" ? text($0) : about " " text($0)); next }
    /^$/ { flush(); next }
    END { flush() }
  '
}

mapfile -t subcommands < <(help_of | awk '/^Subcommands:$/ { on = 1; next }
                                        on && /^  [a-z]/ { print $1 }')
[ ${#subcommands[@]} -gt 0 ] || { echo "cli-manpage: no subcommands in $cli --help" >&2; exit 1; }

write_page() {
cat <<EOF
.TH REMATLAB-CLI 1 "" "RematLab $version" "User Commands"
.SH NAME
rematlab-cli \\- activation checkpointing, measured, without a window
.SH SYNOPSIS
\\fBrematlab-cli\\fR \\fISUBCOMMAND\\fR [\\fIOPTIONS\\fR]
.br
\\fBrematlab-cli\\fR [\\fISUBCOMMAND\\fR] \\fB\\-\\-help\\fR | \\fB\\-\\-help\\-all\\fR
.SH DESCRIPTION
RematLab trains a GPT-style model on an embedded LibTorch engine, applies the activation
checkpointing policy chosen with \\fB\\-\\-checkpoint\\fR and measures peak memory, throughput and
loss. Runs are recorded in a SQLite database that the desktop workbench,
.BR rematlab (1),
shows too.
.SH SUBCOMMANDS
EOF
for subcommand in "${subcommands[@]}"; do
  echo ".SS $subcommand"
  help_of "$subcommand" | roff_subcommand
done
cat <<'EOF'
.SH EXIT STATUS
.TP
.B 0
Done. A run that ran out of memory is a result, not a failure.
.TP
.B 1
An internal failure.
.TP
.B 2
Bad input: one line on standard error names the option or field; nothing was run or written.
.TP
.B 3
\fBcheck\fR found gradients that differ from training without checkpointing.
.SH ENVIRONMENT
.TP
.B REMATLAB_DB
The runs database used when \fB\-\-db\fR is not given.
.TP
.B XDG_DATA_HOME
Where the default database lives when \fBREMATLAB_DB\fR is not set.
.SH FILES
.TP
.I ~/.local/share/rematlab/rematlab.sqlite
The default runs database, shared with the window.
.SH EXAMPLES
.nf
rematlab-cli version
rematlab-cli run \-\-preset tiny \-\-steps 100 \-\-json
rematlab-cli run \-\-preset small \-\-checkpoint every:2 \-\-timeline \-\-json
rematlab-cli check \-\-checkpoint sublayer:1,2 \-\-dropout 0.1
rematlab-cli max\-batch \-\-preset small \-\-checkpoint every:1 \-\-budget 384MiB
.fi
.SH SEE ALSO
.BR rematlab (1)
EOF
}

# Written aside and moved, so an interrupted build leaves no half page that looks up to date.
write_page | gzip -9n >"$output.partial"
mv "$output.partial" "$output"
