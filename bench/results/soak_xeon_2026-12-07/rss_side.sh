#!/bin/sh
# every 60 s: unix time, RSS kB of the server process and of the scheduler process
while true; do
  s=$(pgrep -f "service.cli serve" | head -1); c=$(pgrep -f "service.cli scheduler" | head -1)
  [ -z "$s" ] && break
  echo "$(date +%s) $(grep VmRSS /proc/$s/status | awk '{print $2}') $(grep VmRSS /proc/$c/status 2>/dev/null | awk '{print $2}')"
  sleep 60
done
