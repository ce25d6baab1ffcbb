#!/bin/sh
# Debian's nginx as a server command of the tail-latency job (docs/en/own-server.md):
#
#   scripts/tail-latency.sh --server-cmd 'examples/own-server/nginx-server.sh {port}' \
#       --a 'NGINX_WORKERS=1' --b 'NGINX_WORKERS=2'
#
# Starts nginx in the foreground on 127.0.0.1:PORT, answering every GET with 200 and an empty body
# from memory, with its config and every file it writes in a temporary directory (removed when it
# stops).  Its knobs are environment variables, so the job's arms can set them:
#   NGINX_WORKERS             worker_processes (default 1)
#   NGINX_KEEPALIVE_REQUESTS  requests per keep-alive connection (default 1000000000)
#   NGINX                     the nginx binary (default: nginx on PATH, else /usr/sbin/nginx)
set -eu
port=${1:?usage: nginx-server.sh PORT}
nginx=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
if [ ! -x "$nginx" ]; then
  echo "nginx-server.sh: $nginx not found (scripts/bootstrap.sh --nginx installs it: apt-get install nginx)" >&2
  exit 127
fi
prefix=$(mktemp -d "${TMPDIR:-/tmp}/nginx-server.XXXXXX")
trap 'rm -rf "$prefix"' EXIT
cat > "$prefix/nginx.conf" <<CONF
daemon off;
worker_processes ${NGINX_WORKERS:-1};
pid $prefix/nginx.pid;
error_log stderr notice;
events { worker_connections 4096; }
http {
    access_log off;
    default_type "";
    keepalive_requests ${NGINX_KEEPALIVE_REQUESTS:-1000000000};
    client_body_temp_path $prefix/client_body;
    proxy_temp_path $prefix/proxy;
    fastcgi_temp_path $prefix/fastcgi;
    uwsgi_temp_path $prefix/uwsgi;
    scgi_temp_path $prefix/scgi;
    server {
        listen 127.0.0.1:$port backlog=4096;
        location / { return 200 ""; }
    }
}
CONF
# nginx stops on SIGTERM (the job signals this script's whole process group); this shell passes the
# signal on, waits for nginx's own exit status (a signal interrupts `wait` with 128+N: wait again),
# then the EXIT trap removes the directory.
trap 'kill -TERM "$pid" 2>/dev/null || true' TERM INT
"$nginx" -p "$prefix" -c "$prefix/nginx.conf" -e stderr &
pid=$!
status=255
while [ "$status" -gt 128 ]; do
    status=0
    wait "$pid" || status=$?
done
exit "$status"
