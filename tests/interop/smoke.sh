#!/usr/bin/env bash
# Smoke test of oidc-server.mjs: discovery, JWKS, code flow with PKCE + RFC 9207 iss, token
# exchange (client_secret_basic), refresh rotation and reuse detection, revocation and
# introspection, userinfo, prompt=login / select_account, access-token expiry, RP-initiated
# logout, key rotation, issuer_path mounting, SIGTERM and stdin-close exits.
#
#   ./smoke.sh            # RS256
#   ./smoke.sh ES256
#   ./smoke.sh PS256
#   ./smoke.sh all        # the three in turn
#
# Needs node (>= 20), curl, and `npm ci` done in this folder.
set -euo pipefail
cd "$(dirname "$0")"

if [[ "${1:-RS256}" == all ]]; then
  for a in RS256 ES256 PS256; do "$0" "$a"; done
  exit 0
fi

ALG="${1:-RS256}"
CLIENT_ID=smoke-client
CLIENT_SECRET='s3cret:with/odd+chars'
REDIRECT_URI=http://127.0.0.1:9/callback
POST_LOGOUT=http://127.0.0.1:9/bye

[[ -d node_modules/oidc-provider ]] || { echo "run 'npm ci' in $(pwd) first" >&2; exit 2; }

TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# counted in a file: many checks run inside pipelines (subshells)
ok() { echo >>"$TMP/passed"; printf '  ok   %s\n' "$*"; }
die() { printf '  FAIL %s\n' "$*" >&2; for f in "$TMP"/*.err; do [[ -f "$f" ]] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done; exit 1; }

# js EXPR [json-on-stdin]: evaluates EXPR with `j` = parsed stdin (if any) and prints the result
js() { node -e '
  const fs = require("fs"); let j; try { j = JSON.parse(fs.readFileSync(0, "utf8")); } catch {}
  const r = eval(process.argv[1]); process.stdout.write(typeof r === "string" ? r : JSON.stringify(r));' "$1"; }
check() { # check DESCRIPTION EXPR  (stdin: json) -> EXPR must be true
  local in; in=$(cat); [[ "$(js "$2" <<<"$in")" == true ]] && ok "$1" || die "$1: $2 on $in"; }

# start_server NAME CONFIG-JSON -> sets PORT_<NAME>, ISS_<NAME>, PID_<NAME>; fd for stdin kept open
start_server() {
  local name=$1 cfg=$2
  mkfifo "$TMP/$name.stdin"
  node oidc-server.mjs "$cfg" <"$TMP/$name.stdin" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  local pid=$!
  PIDS+=("$pid")
  # keep the server's stdin open (it exits when this writer closes)
  eval "exec {fd_$name}>\"$TMP/$name.stdin\""
  for _ in $(seq 1 100); do [[ -s "$TMP/$name.out" ]] && break; sleep 0.1; done
  local line; line=$(head -1 "$TMP/$name.out")
  [[ -n "$line" ]] || die "server $name did not start"
  [[ "$(wc -l <"$TMP/$name.out")" -eq 1 ]] || die "more than one stdout line"
  printf -v "PID_$name" '%s' "$pid"
  printf -v "PORT_$name" '%s' "$(js 'j.port' <<<"$line")"
  printf -v "ISS_$name" '%s' "$(js 'j.issuer' <<<"$line")"
  js 'j.ready === true && Object.keys(j).join() === "ready,issuer,port"' <<<"$line" | grep -q true || die "ready line: $line"
  echo "  started $name: $line"
}

# pkce -> "verifier challenge"
pkce() { node -e '
  const c = require("crypto"); const v = c.randomBytes(32).toString("base64url");
  process.stdout.write(v + " " + c.createHash("sha256").update(v).digest("base64url") + "\n");'; }

# jwt_verify ID_TOKEN JWKS_URL -> JSON {header, payload} after signature verification with jose
jwt_verify() { node --input-type=module -e '
  import { createRemoteJWKSet, jwtVerify } from "jose";
  const [tok, jwks] = process.argv.slice(1);
  const { payload, protectedHeader } = await jwtVerify(tok, createRemoteJWKSet(new URL(jwks)));
  process.stdout.write(JSON.stringify({ header: protectedHeader, payload }));' "$1" "$2"; }

CLIENT_JSON=$(printf '{"client_id":"%s","client_secret":"%s","redirect_uris":["%s"],"post_logout_redirect_uris":["%s"]}' \
  "$CLIENT_ID" "$CLIENT_SECRET" "$REDIRECT_URI" "$POST_LOGOUT")

echo "== oidc-server smoke test, alg $ALG"
start_server main "{\"port\":0,\"alg\":\"$ALG\",\"clients\":[$CLIENT_JSON]}"
ISS=$ISS_main
ADMIN="http://127.0.0.1:$PORT_main/__admin"
[[ "$ISS" == "http://127.0.0.1:$PORT_main" ]] || die "issuer $ISS"

# ------------------------------------------------------------------ discovery + JWKS
DISC=$(curl -sf "$ISS/.well-known/openid-configuration")
check "discovery issuer is exactly $ISS" "j.issuer === '$ISS'" <<<"$DISC"
check "discovery: authorization_response_iss_parameter_supported" "j.authorization_response_iss_parameter_supported === true" <<<"$DISC"
check "discovery: id_token_signing_alg_values_supported = [$ALG]" "JSON.stringify(j.id_token_signing_alg_values_supported) === '[\"$ALG\"]'" <<<"$DISC"
check "discovery: S256 only, code only" "j.code_challenge_methods_supported.join() === 'S256' && j.response_types_supported.join() === 'code'" <<<"$DISC"
check "discovery: revocation, introspection, userinfo, end_session endpoints" \
  "['revocation_endpoint','introspection_endpoint','userinfo_endpoint','end_session_endpoint'].every(k => j[k].startsWith('$ISS/'))" <<<"$DISC"
check "discovery: client_secret_basic and client_secret_post" \
  "j.token_endpoint_auth_methods_supported.join() === 'client_secret_basic,client_secret_post'" <<<"$DISC"
AUTHZ=$(js j.authorization_endpoint <<<"$DISC"); TOKEN=$(js j.token_endpoint <<<"$DISC")
REVOKE=$(js j.revocation_endpoint <<<"$DISC"); INTROSPECT=$(js j.introspection_endpoint <<<"$DISC")
USERINFO=$(js j.userinfo_endpoint <<<"$DISC"); ENDSESSION=$(js j.end_session_endpoint <<<"$DISC")
JWKS_URI=$(js j.jwks_uri <<<"$DISC")

JWKS=$(curl -sf "$JWKS_URI")
KID1=$(curl -sf "$ADMIN/stats" | js j.kid)
check "JWKS: one public $ALG key with kid $KID1" \
  "j.keys.length === 1 && j.keys[0].alg === '$ALG' && j.keys[0].kid === '$KID1' && j.keys[0].use === 'sig' && !('d' in j.keys[0])" <<<"$JWKS"

# ------------------------------------------------------------------ code flow
JAR="$TMP/jar.json"
# flow NAME LOGIN [extra query] -> sets CB_<NAME> (callback json), VERIFIER_<NAME>, STATE_<NAME>, NONCE_<NAME>
flow() {
  local name=$1 login=$2 extra=${3:-} v c state nonce url out
  read -r v c < <(pkce)
  state=st-$RANDOM$RANDOM; nonce=n-$RANDOM$RANDOM
  url="$AUTHZ?response_type=code&client_id=$CLIENT_ID&redirect_uri=$(js "encodeURIComponent('$REDIRECT_URI')")&scope=openid%20profile&state=$state&nonce=$nonce&code_challenge=$c&code_challenge_method=S256$extra"
  out=$(node smoke-browser.mjs "$JAR" authorize "$url" "$REDIRECT_URI" "$login") || die "flow $name"
  printf -v "CB_$name" '%s' "$out"; printf -v "VERIFIER_$name" '%s' "$v"
  printf -v "STATE_$name" '%s' "$state"; printf -v "NONCE_$name" '%s' "$nonce"
}
cb_param() { js "new URL(j.callback).searchParams.get('$1')"; }

flow f1 alice
check "flow 1: login form shown (no session)" "j.login_form_shown === true && j.prompt === 'login'" <<<"$CB_f1"
[[ "$(cb_param iss <<<"$CB_f1")" == "$ISS" ]] && ok "callback carries iss=$ISS (RFC 9207)" || die "callback iss: $CB_f1"
[[ "$(cb_param state <<<"$CB_f1")" == "$STATE_f1" ]] && ok "callback carries state" || die "callback state"
CODE=$(cb_param code <<<"$CB_f1")

# PKCE is enforced: wrong verifier fails and burns the code? use a separate flow for that
flow f0 alice
CODE0=$(cb_param code <<<"$CB_f0")
R=$(curl -s -u "$CLIENT_ID:$(js "encodeURIComponent('$CLIENT_SECRET')")" -d grant_type=authorization_code \
  --data-urlencode "code=$CODE0" --data-urlencode "redirect_uri=$REDIRECT_URI" -d code_verifier=wrongwrongwrongwrongwrongwrongwrongwrongwrong "$TOKEN")
check "PKCE: wrong code_verifier -> invalid_grant" "j.error === 'invalid_grant'" <<<"$R"
check "flow 2 reused the session (no login form)" "j.login_form_shown === false" <<<"$CB_f0"

# client_secret_basic: RFC 6749 2.3.1 form-urlencodes id and secret before base64
BASIC=(-u "$CLIENT_ID:$(js "encodeURIComponent('$CLIENT_SECRET')")")
TOK=$(curl -s "${BASIC[@]}" -d grant_type=authorization_code --data-urlencode "code=$CODE" \
  --data-urlencode "redirect_uri=$REDIRECT_URI" --data-urlencode "code_verifier=$VERIFIER_f1" "$TOKEN")
check "token (client_secret_basic): access_token, id_token, refresh_token, Bearer, expires_in 3600" \
  "j.access_token && j.id_token && j.refresh_token && j.token_type === 'Bearer' && j.expires_in === 3600" <<<"$TOK"
AT1=$(js j.access_token <<<"$TOK"); RT1=$(js j.refresh_token <<<"$TOK"); IDT=$(js j.id_token <<<"$TOK")
IDV=$(jwt_verify "$IDT" "$JWKS_URI") || die "id_token signature"
check "id_token: signature ok, alg $ALG, kid $KID1, iss, aud, nonce, sub=alice, preferred_username, name" \
  "j.header.alg === '$ALG' && j.header.kid === '$KID1' && j.payload.iss === '$ISS' && j.payload.aud === '$CLIENT_ID' && j.payload.nonce === '$NONCE_f1' && j.payload.sub === 'alice' && j.payload.preferred_username === 'alice' && j.payload.name === 'User alice'" <<<"$IDV"

UI=$(curl -s -H "authorization: Bearer $AT1" "$USERINFO")
check "userinfo: sub, preferred_username, name" "j.sub === 'alice' && j.preferred_username === 'alice' && j.name === 'User alice'" <<<"$UI"

# ------------------------------------------------------------------ refresh rotation + reuse
R2=$(curl -s "${BASIC[@]}" -d grant_type=refresh_token --data-urlencode "refresh_token=$RT1" "$TOKEN")
RT2=$(js j.refresh_token <<<"$R2")
check "refresh (basic): new access token, new refresh token, id_token" \
  "j.access_token && j.access_token !== '$AT1' && j.refresh_token && j.refresh_token !== '$RT1' && !!j.id_token" <<<"$R2"
R3=$(curl -s -d grant_type=refresh_token --data-urlencode "refresh_token=$RT2" -d "client_id=$CLIENT_ID" \
  --data-urlencode "client_secret=$CLIENT_SECRET" "$TOKEN")
RT3=$(js j.refresh_token <<<"$R3")
check "refresh (client_secret_post) rotates again" "j.refresh_token && j.refresh_token !== '$RT2'" <<<"$R3"
R=$(curl -s -w '\n%{http_code}' "${BASIC[@]}" -d grant_type=refresh_token --data-urlencode "refresh_token=$RT1" "$TOKEN")
[[ "$(tail -1 <<<"$R")" == 400 ]] || die "reuse status: $R"
check "reuse of consumed refresh token -> 400 invalid_grant" "j.error === 'invalid_grant'" <<<"$(head -1 <<<"$R")"
curl -sf "$ADMIN/stats" | check "stats: reuse detected (error_detail 'refresh token already used')" \
  "j.refresh_token_reuse_detected === 1 && j.token_requests.error_details['refresh token already used'] === 1"
R=$(curl -s "${BASIC[@]}" -d grant_type=refresh_token --data-urlencode "refresh_token=$RT3" "$TOKEN")
check "reuse detection revoked the whole grant (latest refresh token dead too)" "j.error === 'invalid_grant'" <<<"$R"

R=$(curl -s "${BASIC[@]}" -d grant_type=authorization_code --data-urlencode "code=$CODE" \
  --data-urlencode "redirect_uri=$REDIRECT_URI" --data-urlencode "code_verifier=$VERIFIER_f1" "$TOKEN")
check "authorization code replay -> invalid_grant (also revokes the grant)" "j.error === 'invalid_grant'" <<<"$R"

# ------------------------------------------------------------------ revocation + introspection
flow f2 alice
TOK=$(curl -s "${BASIC[@]}" -d grant_type=authorization_code --data-urlencode "code=$(cb_param code <<<"$CB_f2")" \
  --data-urlencode "redirect_uri=$REDIRECT_URI" --data-urlencode "code_verifier=$VERIFIER_f2" "$TOKEN")
AT=$(js j.access_token <<<"$TOK"); RT=$(js j.refresh_token <<<"$TOK")
curl -s "${BASIC[@]}" --data-urlencode "token=$AT" "$INTROSPECT" | check "introspection: fresh access token active" \
  "j.active === true && j.sub === 'alice' && j.client_id === '$CLIENT_ID' && j.token_type === 'Bearer'"
[[ "$(curl -s -o /dev/null -w '%{http_code}' "${BASIC[@]}" --data-urlencode "token=$AT" -d token_type_hint=access_token "$REVOKE")" == 200 ]] \
  && ok "revocation of access token -> 200" || die "revocation status"
curl -s "${BASIC[@]}" --data-urlencode "token=$AT" "$INTROSPECT" | check "introspection after revocation: active false" "j.active === false"
[[ "$(curl -s -o /dev/null -w '%{http_code}' -H "authorization: Bearer $AT" "$USERINFO")" == 401 ]] && ok "userinfo with revoked token -> 401" || die "userinfo revoked"
curl -s "${BASIC[@]}" --data-urlencode "token=$RT" "$INTROSPECT" | check "refresh token still active after access token revocation" "j.active === true"
[[ "$(curl -s -o /dev/null -w '%{http_code}' "${BASIC[@]}" --data-urlencode "token=$RT" -d token_type_hint=refresh_token "$REVOKE")" == 200 ]] \
  && ok "revocation of refresh token -> 200" || die "revocation rt"
curl -s "${BASIC[@]}" --data-urlencode "token=$RT" "$INTROSPECT" | check "refresh token after revocation: active false" "j.active === false"
[[ "$(curl -s -o /dev/null -w '%{http_code}' "${BASIC[@]}" -d token=not-a-token "$REVOKE")" == 200 ]] && ok "revocation of unknown token -> 200 (RFC 7009)" || die "unknown revocation"

# ------------------------------------------------------------------ prompts
flow f3 alice '&prompt=login'
check "prompt=login with a session: login form shown" "j.login_form_shown === true && j.prompt === 'login'" <<<"$CB_f3"
flow f4 bob '&prompt=select_account'
check "prompt=select_account with a session: login form shown" "j.login_form_shown === true && j.prompt === 'select_account'" <<<"$CB_f4"
check "account switch alice -> bob passed oidc-provider's auto-submitting end-session form" "j.auto_submitted_forms === 1" <<<"$CB_f4"
TOK=$(curl -s "${BASIC[@]}" -d grant_type=authorization_code --data-urlencode "code=$(cb_param code <<<"$CB_f4")" \
  --data-urlencode "redirect_uri=$REDIRECT_URI" --data-urlencode "code_verifier=$VERIFIER_f4" "$TOKEN")
IDT_BOB=$(js j.id_token <<<"$TOK"); RT_BOB=$(js j.refresh_token <<<"$TOK")
jwt_verify "$IDT_BOB" "$JWKS_URI" | check "switched account: sub=bob" "j.payload.sub === 'bob'"
flow fd -deny- '&prompt=login'
check "Cancel on the login form -> callback error=access_denied with iss" \
  "new URL(j.callback).searchParams.get('error') === 'access_denied' && new URL(j.callback).searchParams.get('iss') === '$ISS'" <<<"$CB_fd"
flow f5 nobody '&prompt=none'
check "prompt=none with a session: no form, code issued" "j.login_form_shown === false && !!new URL(j.callback).searchParams.get('code')" <<<"$CB_f5"

# ------------------------------------------------------------------ access token expiry
curl -sf -X POST -d '{"access_ttl":2}' "$ADMIN/config" | check "admin config: access_ttl=2" "j.ok === true"
R=$(curl -s "${BASIC[@]}" -d grant_type=refresh_token --data-urlencode "refresh_token=$RT_BOB" "$TOKEN")
check "refresh with access_ttl=2 -> expires_in 2" "j.expires_in === 2" <<<"$R"
AT_SHORT=$(js j.access_token <<<"$R"); RT_BOB=$(js j.refresh_token <<<"$R")
sleep 3
curl -s "${BASIC[@]}" --data-urlencode "token=$AT_SHORT" "$INTROSPECT" | check "access token expired after 3 s: active false" "j.active === false"
curl -sf -X POST -d '{"access_ttl":3600}' "$ADMIN/config" >/dev/null

# ------------------------------------------------------------------ key rotation
R=$(curl -sf -X POST -d '{"keep_old":false}' "$ADMIN/rotate-keys")
KID2=$(js j.kid <<<"$R")
check "rotate-keys keep_old=false: new kid" "j.kid !== '$KID1' && j.previous_kid === '$KID1' && j.kids.length === 1" <<<"$R"
curl -sf "$JWKS_URI" | check "JWKS serves only the new kid" "j.keys.length === 1 && j.keys[0].kid === '$KID2'"
R=$(curl -s "${BASIC[@]}" -d grant_type=refresh_token --data-urlencode "refresh_token=$RT_BOB" "$TOKEN")
check "tokens survive rotation (refresh still works)" "!!j.id_token" <<<"$R"
RT_BOB=$(js j.refresh_token <<<"$R")
jwt_verify "$(js j.id_token <<<"$R")" "$JWKS_URI" | check "new id_token signed with new kid" "j.header.kid === '$KID2'"
R=$(curl -sf -X POST -d '{"keep_old":true}' "$ADMIN/rotate-keys")
KID3=$(js j.kid <<<"$R")
curl -sf "$JWKS_URI" | check "rotate-keys keep_old=true: JWKS has new + old kid" "j.keys.map(k => k.kid).join() === '$KID3,$KID2'"
R=$(curl -s "${BASIC[@]}" -d grant_type=refresh_token --data-urlencode "refresh_token=$RT_BOB" "$TOKEN")
jwt_verify "$(js j.id_token <<<"$R")" "$JWKS_URI" | check "id_token signed with newest kid" "j.header.kid === '$KID3'"
IDT_HINT=$(js j.id_token <<<"$R")

# ------------------------------------------------------------------ logout
LO=$(node smoke-browser.mjs "$JAR" logout "$ENDSESSION?id_token_hint=$IDT_HINT&post_logout_redirect_uri=$(js "encodeURIComponent('$POST_LOGOUT')")&state=bye1") || die "logout"
check "logout page auto-submits (logout_confirm=false); form POST redirects to post_logout_redirect_uri with state" \
  "j.auto_submit_script === true && j.final === '$POST_LOGOUT?state=bye1'" <<<"$LO"
flow f6 carol
check "after logout the login form is shown again" "j.login_form_shown === true" <<<"$CB_f6"
LO=$(node smoke-browser.mjs "$JAR" logout "$ENDSESSION") || die "logout 2"
check "logout without client: success page" "j.body.includes('id=\"logout-success\"')" <<<"$LO"

# ------------------------------------------------------------------ stats
STATS=$(curl -sf "$ADMIN/stats")
check "stats: token requests by grant type" \
  "j.token_requests.by_grant_type.authorization_code === 5 && j.token_requests.by_grant_type.refresh_token === 7" <<<"$STATS"
check "stats: 1 refresh reuse detected, revocations 3 (1 AT, 1 RT, 1 unknown)" \
  "j.refresh_token_reuse_detected === 1 && j.revocations.ok === 3 && j.revocations.access_token === 1 && j.revocations.refresh_token === 1 && j.revocations.not_found === 1" <<<"$STATS"
check "stats: client auth methods seen at the token endpoint" \
  "j.client_auth.token.client_secret_basic === 11 && j.client_auth.token.client_secret_post === 1" <<<"$STATS"
check "stats: 2 key rotations, end_session confirmed 3 (2 logouts + 1 account switch), 4 logins" "j.key_rotations === 2 && j.end_session.confirmed === 3 && j.logins === 4 && j.last_login === 'carol'" <<<"$STATS"

# ------------------------------------------------------------------ issuer_path
start_server realm "{\"port\":0,\"alg\":\"$ALG\",\"issuer_path\":\"/realm/\",\"clients\":[$CLIENT_JSON]}"
[[ "$ISS_realm" == "http://127.0.0.1:$PORT_realm/realm/" ]] && ok "issuer_path: issuer $ISS_realm" || die "realm issuer $ISS_realm"
DISC=$(curl -sf "http://127.0.0.1:$PORT_realm/realm/.well-known/openid-configuration")
check "issuer_path: discovery at /realm/.well-known, issuer with trailing slash, endpoints under /realm/" \
  "j.issuer === '$ISS_realm' && j.token_endpoint === 'http://127.0.0.1:$PORT_realm/realm/token' && j.jwks_uri.startsWith('$ISS_realm')" <<<"$DISC"
[[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT_realm/.well-known/openid-configuration")" == 404 ]] \
  && ok "issuer_path: nothing at the root" || die "root discovery served"
AUTHZ=$(js j.authorization_endpoint <<<"$DISC"); TOKEN=$(js j.token_endpoint <<<"$DISC"); JAR="$TMP/jar2.json"
flow r1 dave
[[ "$(cb_param iss <<<"$CB_r1")" == "$ISS_realm" ]] && ok "issuer_path: callback iss=$ISS_realm" || die "realm iss $CB_r1"
TOK=$(curl -s "${BASIC[@]}" -d grant_type=authorization_code --data-urlencode "code=$(cb_param code <<<"$CB_r1")" \
  --data-urlencode "redirect_uri=$REDIRECT_URI" --data-urlencode "code_verifier=$VERIFIER_r1" "$TOKEN")
jwt_verify "$(js j.id_token <<<"$TOK")" "$(js j.jwks_uri <<<"$DISC")" | check "issuer_path: id_token iss has the trailing slash" "j.payload.iss === '$ISS_realm' && j.payload.sub === 'dave'"

# ------------------------------------------------------------------ process lifecycle
kill -TERM "$PID_main"; wait "$PID_main" && ok "SIGTERM: clean exit 0" || die "SIGTERM exit status $?"
eval "exec {fd_realm}>&-"
for _ in $(seq 1 50); do kill -0 "$PID_realm" 2>/dev/null || break; sleep 0.1; done
kill -0 "$PID_realm" 2>/dev/null && die "server did not exit when stdin closed" || ok "stdin closed: server exited"

echo "== $ALG: all $(wc -l <"$TMP/passed") checks passed"
