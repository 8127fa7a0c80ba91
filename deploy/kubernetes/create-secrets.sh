#!/usr/bin/env bash
# Creates (or updates) every Secret the production overlay names, in one namespace:
#
#   skiff-postgres         url                         the metadata service's PostgreSQL URL
#   skiff-aws              AWS_ACCESS_KEY_ID,          S3 credentials (skip with --no-aws
#                          AWS_SECRET_ACCESS_KEY       when the pods get an IAM role)
#   skiff-metadata-tls     tls.crt, tls.key, ca.crt    metadata's server certificate and its CA
#   skiff-metadata-tokens  tokens                      role:token lines (agent, compactor, reader, admin)
#   skiff-agent-token      token                       the agent role's token
#   skiff-compactor-token  token                       the compactor role's token
#   skiff-reader-token     token                       the reader role's token (Prometheus
#                                                      scrapes metadata's /metrics with it)
#   skiff-kafka-tls        tls.crt, tls.key            the agents' SASL_SSL listener certificate
#
# The four tokens are random (32 bytes, hex) and made once: an existing
# skiff-metadata-tokens Secret is kept unless --rotate-tokens is given, so re-running the
# script for a new certificate does not log every client out. Read the reader and admin
# tokens back with
#   kubectl get secret skiff-metadata-tokens -o jsonpath='{.data.tokens}' | base64 -d
#
# Usage:
#   create-secrets.sh --postgres-url URL \
#       --metadata-cert FILE --metadata-key FILE --metadata-ca FILE \
#       --kafka-cert FILE --kafka-key FILE \
#       [--aws-access-key-id ID --aws-secret-access-key KEY | --no-aws] \
#       [--namespace NS] [--rotate-tokens] [--dry-run]
# AWS keys default to AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY from the environment.
# --dry-run prints the Secrets as YAML (no cluster needed) instead of applying them.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
die() { echo "create-secrets.sh: $*" >&2; exit 2; }

namespace="" postgres_url="" metadata_cert="" metadata_key="" metadata_ca=""
kafka_cert="" kafka_key="" aws=1 rotate=0 dry_run=0
aws_id="${AWS_ACCESS_KEY_ID:-}" aws_key="${AWS_SECRET_ACCESS_KEY:-}"
while [ $# -gt 0 ]; do
    case "$1" in
        --namespace) namespace="$2"; shift 2 ;;
        --postgres-url) postgres_url="$2"; shift 2 ;;
        --metadata-cert) metadata_cert="$2"; shift 2 ;;
        --metadata-key) metadata_key="$2"; shift 2 ;;
        --metadata-ca) metadata_ca="$2"; shift 2 ;;
        --kafka-cert) kafka_cert="$2"; shift 2 ;;
        --kafka-key) kafka_key="$2"; shift 2 ;;
        --aws-access-key-id) aws_id="$2"; shift 2 ;;
        --aws-secret-access-key) aws_key="$2"; shift 2 ;;
        --no-aws) aws=0; shift ;;
        --rotate-tokens) rotate=1; shift ;;
        --dry-run) dry_run=1; shift ;;
        -h|--help) usage ;;
        *) die "unknown argument $1 (--help lists them)" ;;
    esac
done

[ -n "$postgres_url" ] || die "--postgres-url is required"
for f in "$metadata_cert" "$metadata_key" "$metadata_ca" "$kafka_cert" "$kafka_key"; do
    [ -n "$f" ] || die "--metadata-cert, --metadata-key, --metadata-ca, --kafka-cert and --kafka-key are required"
    [ -r "$f" ] || die "cannot read $f"
done
if [ "$aws" = 1 ] && { [ -z "$aws_id" ] || [ -z "$aws_key" ]; }; then
    die "S3 keys missing: --aws-access-key-id/--aws-secret-access-key (or the AWS_* variables), or --no-aws"
fi

ns_args=()
[ -n "$namespace" ] && ns_args=(--namespace "$namespace")

# One Secret: rendered client-side, then applied (create or update) or printed.
put() {
    if [ "$dry_run" = 1 ]; then
        echo "---"
        kubectl create secret "${ns_args[@]}" "$@" --dry-run=client -o yaml
    else
        kubectl create secret "${ns_args[@]}" "$@" --dry-run=client -o yaml | kubectl apply "${ns_args[@]}" -f -
    fi
}

token() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }

put generic skiff-postgres --from-literal=url="$postgres_url"
if [ "$aws" = 1 ]; then
    put generic skiff-aws --from-literal=AWS_ACCESS_KEY_ID="$aws_id" \
        --from-literal=AWS_SECRET_ACCESS_KEY="$aws_key"
fi
put generic skiff-metadata-tls --from-file=tls.crt="$metadata_cert" \
    --from-file=tls.key="$metadata_key" --from-file=ca.crt="$metadata_ca"
put tls skiff-kafka-tls --cert="$kafka_cert" --key="$kafka_key"

if [ "$rotate" = 0 ] && [ "$dry_run" = 0 ] \
    && kubectl get secret "${ns_args[@]}" skiff-metadata-tokens >/dev/null 2>&1; then
    echo "create-secrets.sh: keeping the existing tokens (--rotate-tokens makes new ones)" >&2
    if ! kubectl get secret "${ns_args[@]}" skiff-reader-token >/dev/null 2>&1; then
        # made by a newer script than the one that made the tokens: take the reader's line
        reader_token="$(kubectl get secret "${ns_args[@]}" skiff-metadata-tokens -o jsonpath='{.data.tokens}' \
            | base64 -d | sed -n 's/^reader://p' | head -n 1)"
        [ -n "$reader_token" ] || die "skiff-metadata-tokens has no reader token (--rotate-tokens makes one)"
        put generic skiff-reader-token --from-literal=token="$reader_token"
    fi
    exit 0
fi
agent_token="$(token)" compactor_token="$(token)" reader_token="$(token)"
tokens="agent:${agent_token}
compactor:${compactor_token}
reader:${reader_token}
admin:$(token)"
put generic skiff-metadata-tokens --from-literal=tokens="$tokens"
put generic skiff-agent-token --from-literal=token="$agent_token"
put generic skiff-compactor-token --from-literal=token="$compactor_token"
put generic skiff-reader-token --from-literal=token="$reader_token"
