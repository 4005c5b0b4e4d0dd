#!/usr/bin/env node
// A tiny "browser" for smoke.sh: fetch + a cookie jar kept in a file, redirects followed by hand.
//
//   node smoke-browser.mjs <jar.json> authorize <authorization-url> <redirect-uri-prefix> [login-name]
//     Follows the authorization request; if the login form appears, submits <login-name>
//     (or clicks Cancel if <login-name> is "-deny-").
//     Stops at the first redirect to <redirect-uri-prefix> and prints
//     {"callback": "...", "login_form_shown": bool, "prompt": "login"|"select_account"|null}
//
//   node smoke-browser.mjs <jar.json> logout <end-session-url> [yes|no]
//     Loads the logout page, submits its form (logout=yes unless "no"), follows redirects, prints
//     {"final": "<last url>", "status": N, "body": "<first 200 chars>", "auto_submit_script": bool}

import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import process from 'node:process';

const [jarFile, cmd, ...args] = process.argv.slice(2);
if (!jarFile || !cmd) {
  process.stderr.write('usage: smoke-browser.mjs <jar.json> authorize|logout ...\n');
  process.exit(2);
}

// ------------------------------------------------------------------ cookie jar (host-only, path)
let jar = existsSync(jarFile) ? JSON.parse(readFileSync(jarFile, 'utf8')) : [];
const saveJar = () => writeFileSync(jarFile, JSON.stringify(jar));

function storeCookies(url, res) {
  for (const line of res.headers.getSetCookie()) {
    const [pair, ...attrs] = line.split(';').map((s) => s.trim());
    const i = pair.indexOf('=');
    const name = pair.slice(0, i);
    const value = pair.slice(i + 1);
    let path = '/';
    let expired = value === '';
    for (const a of attrs) {
      const [k, v = ''] = a.split('=');
      const key = k.toLowerCase();
      if (key === 'path') path = v || '/';
      if (key === 'expires' && Date.parse(v) <= Date.now()) expired = true;
      if (key === 'max-age' && Number(v) <= 0) expired = true;
    }
    jar = jar.filter((c) => !(c.name === name && c.path === path && c.host === url.host));
    if (!expired) jar.push({ name, value, path, host: url.host });
  }
  saveJar();
}

function cookieHeader(url) {
  return jar
    .filter((c) => c.host === url.host && (url.pathname === c.path || url.pathname.startsWith(c.path.endsWith('/') ? c.path : `${c.path}/`)))
    .map((c) => `${c.name}=${c.value}`)
    .join('; ');
}

async function request(method, href, body) {
  const url = new URL(href);
  const headers = { accept: 'text/html' };
  const cookie = cookieHeader(url);
  if (cookie) headers.cookie = cookie;
  if (body) headers['content-type'] = 'application/x-www-form-urlencoded';
  const res = await fetch(url, { method, headers, body, redirect: 'manual' });
  storeCookies(url, res);
  const text = await res.text();
  return { url, res, text, location: res.headers.get('location') && new URL(res.headers.get('location'), url).href };
}

const attr = (html, re) => { const m = re.exec(html); return m ? m[1].replace(/&amp;/g, '&') : null; };

function autoSubmit(r) {
  const action = attr(r.text, /<form[^>]*action="([^"]+)"/);
  const form = new URLSearchParams();
  for (const m of r.text.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)"/g)) form.set(m[1], m[2].replace(/&amp;/g, '&'));
  return { method: 'POST', href: new URL(action, r.url).href, body: form.toString() };
}

// ------------------------------------------------------------------ commands
async function authorize(startUrl, redirectPrefix, loginName = 'alice') {
  let loginShown = false;
  let prompt = null;
  let autoSubmitted = 0;
  let next = { method: 'GET', href: startUrl, body: undefined };
  for (let hops = 0; hops < 20; hops += 1) {
    if (next.href.startsWith(redirectPrefix)) {
      return { callback: next.href, login_form_shown: loginShown, prompt, auto_submitted_forms: autoSubmitted };
    }
    const r = await request(next.method, next.href, next.body);
    if (r.location) {
      next = { method: 'GET', href: r.location };
      continue;
    }
    if (r.res.status === 200 && r.text.includes('id="login-form"')) {
      loginShown = true;
      prompt = attr(r.text, /data-prompt="([^"]*)"/);
      const action = attr(r.text, /id="login-form"[^>]*action="([^"]+)"/);
      const form = loginName === '-deny-'
        ? { username: '', decision: 'deny' }
        : { username: loginName, decision: 'allow' };
      next = { method: 'POST', href: new URL(action, r.url).href, body: new URLSearchParams(form).toString() };
      continue;
    }
    if (r.res.status === 200 && r.text.includes('document.forms[0].submit()')) {
      // auto-submitting form (e.g. oidc-provider ending the old session when the account changes)
      next = autoSubmit(r);
      autoSubmitted += 1;
      continue;
    }
    throw new Error(`unexpected response ${r.res.status} at ${r.url.href}: ${r.text.slice(0, 400)}`);
  }
  throw new Error('too many redirects');
}

async function logout(endSessionUrl, answer = 'yes') {
  const page = await request('GET', endSessionUrl);
  let r = page;
  const autoSubmitScript = page.text.includes('document.getElementById("logout-yes").click()');
  if (page.res.status === 200 && page.text.includes('op.logoutForm')) {
    const action = attr(page.text, /id="op\.logoutForm"[^>]*action="([^"]+)"/);
    const xsrf = attr(page.text, /name="xsrf" value="([^"]+)"/);
    const form = new URLSearchParams({ xsrf });
    if (answer === 'yes') form.set('logout', 'yes');
    r = await request('POST', new URL(action, page.url).href, form.toString());
  } else if (!page.location) {
    throw new Error(`unexpected logout page ${page.res.status}: ${page.text.slice(0, 400)}`);
  }
  // follow redirects on the provider's origin only (the post-logout redirect URI is not served)
  for (let hops = 0; r.location && hops < 10; hops += 1) {
    const loc = new URL(r.location);
    if (loc.host !== r.url.host) return { final: loc.href, status: r.res.status, body: '', auto_submit_script: autoSubmitScript };
    r = await request('GET', loc.href);
  }
  return { final: r.url.href, status: r.res.status, body: r.text.slice(0, 200), auto_submit_script: autoSubmitScript };
}

try {
  let out;
  if (cmd === 'authorize') out = await authorize(...args);
  else if (cmd === 'logout') out = await logout(...args);
  else throw new Error(`unknown command ${cmd}`);
  process.stdout.write(`${JSON.stringify(out)}\n`);
} catch (err) {
  process.stderr.write(`smoke-browser: ${err.message}\n`);
  process.exit(1);
}
