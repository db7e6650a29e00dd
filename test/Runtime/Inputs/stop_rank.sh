#!/bin/sh
# usage: stop_rank.sh RANK FILE LINES COMMAND [ARGS...]
# Runs COMMAND in this process (exec) under mpirun. On the launcher's rank RANK
# (OMPI_COMM_WORLD_RANK) it stops the process with SIGSTOP: at once, before
# COMMAND starts, when LINES is 0; else once FILE (rank 0's --metrics) has
# LINES lines, or after 30 s. Nothing continues it: the launcher's teardown
# does (SIGCONT, then SIGTERM).
rank=$1 file=$2 lines=$3
shift 3
if [ "$OMPI_COMM_WORLD_RANK" = "$rank" ]; then
  if [ "$lines" = 0 ]; then
    kill -STOP $$
  else
    (
      i=0
      while [ $i -lt 600 ] && kill -0 $$ 2>/dev/null &&
        [ "$(cat "$file" 2>/dev/null | wc -l)" -lt "$lines" ]; do
        sleep 0.05
        i=$((i + 1))
      done
      kill -STOP $$ 2>/dev/null
    ) </dev/null >/dev/null 2>&1 &
  fi
fi
exec "$@"
