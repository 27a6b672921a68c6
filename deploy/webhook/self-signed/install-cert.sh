#!/bin/sh
# The webhook's serving certificate without cert-manager: a CA and a
# certificate for the webhook's Service made with openssl, the Secret the
# Deployment mounts, and the CA set as the MutatingWebhookConfiguration's
# caBundle. Nothing is pasted by hand; run it again to rotate (the webhook
# serves the new certificate within 10 s, and the new caBundle is set first so
# no call fails in between... provided both stay valid: the old CA is kept in
# the bundle until the next run).
#
#   deploy/webhook/self-signed/install-cert.sh                  # make and install
#   deploy/webhook/self-signed/install-cert.sh --out DIR        # only make the files
#
# Needs openssl (1.1.1 or 3.x); installing needs kubectl with rights on the
# Secret and the MutatingWebhookConfiguration. Environment:
#   NAMESPACE  the webhook's namespace       [etcd-member-agent-system]
#   SERVICE    the webhook's Service         [etcd-member-agent-webhook]
#   SECRET     the Deployment's TLS Secret   [etcd-member-agent-webhook-tls]
#   CONFIG     the MutatingWebhookConfiguration [etcd-member-agent]
#   DAYS       the certificate's validity    [365]
#   EXTRA_SANS more subjectAltNames, openssl syntax (IP:127.0.0.1,DNS:x) []
set -eu

namespace=${NAMESPACE:-etcd-member-agent-system}
service=${SERVICE:-etcd-member-agent-webhook}
secret=${SECRET:-etcd-member-agent-webhook-tls}
config=${CONFIG:-etcd-member-agent}
days=${DAYS:-365}

out=
if [ "${1:-}" = "--out" ]; then
  out=${2:?--out needs a directory}
  mkdir -p "$out"
  dir=$out
else
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi
umask 077

openssl ecparam -name prime256v1 -genkey -noout -out "$dir/ca.key"
openssl req -x509 -new -key "$dir/ca.key" -sha256 -days 3650 \
  -subj "/CN=etcd-member-agent-webhook-ca" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out "$dir/ca.crt"
openssl ecparam -name prime256v1 -genkey -noout -out "$dir/tls.key"
openssl req -new -key "$dir/tls.key" -subj "/CN=$service.$namespace.svc" -out "$dir/tls.csr"
cat > "$dir/ext.cnf" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:$service.$namespace.svc,DNS:$service.$namespace.svc.cluster.local${EXTRA_SANS:+,$EXTRA_SANS}
EXT
openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
  -sha256 -days "$days" -extfile "$dir/ext.cnf" -out "$dir/tls.crt" 2>/dev/null
rm -f "$dir/tls.csr" "$dir/ext.cnf" "$dir/ca.srl"

if [ -n "$out" ]; then
  echo "install-cert: wrote $out/ca.crt, $out/tls.crt and $out/tls.key" >&2
  exit 0
fi

# The CA first, so the API server trusts the new certificate before it serves;
# the previous CA stays in the bundle until the next rotation.
kubectl get mutatingwebhookconfiguration "$config" -o jsonpath='{.webhooks[0].clientConfig.caBundle}' \
  | base64 -d 2>/dev/null \
  | awk '/-----BEGIN CERTIFICATE-----/{n++} n==1' > "$dir/previous.crt" || true
bundle=$(cat "$dir/ca.crt" "$dir/previous.crt" | base64 | tr -d '\n')
patch=
i=0
for _ in $(kubectl get mutatingwebhookconfiguration "$config" -o jsonpath='{.webhooks[*].name}'); do
  patch="$patch${patch:+,}{\"op\":\"replace\",\"path\":\"/webhooks/$i/clientConfig/caBundle\",\"value\":\"$bundle\"}"
  i=$((i + 1))
done
kubectl patch mutatingwebhookconfiguration "$config" --type=json -p "[$patch]"
kubectl -n "$namespace" create secret tls "$secret" --cert="$dir/tls.crt" --key="$dir/tls.key" \
  --dry-run=client -o yaml | kubectl apply -f -
echo "install-cert: $namespace/$secret holds a certificate for $service.$namespace.svc; $config trusts its CA" >&2
