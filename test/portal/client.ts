// A tiny cookie-keeping HTTP client for portal tests (no browser).
export class PortalClient {
  cookies = new Map<string, string>();
  lastSetCookies: string[] = [];
  constructor(
    readonly base: string,
    readonly defaultHeaders: Record<string, string> = {},
  ) {}

  private store(res: Response) {
    this.lastSetCookies = res.headers.getSetCookie();
    for (const c of this.lastSetCookies) {
      const [pair, ...attrs] = c.split(';');
      const i = pair.indexOf('=');
      const name = pair.slice(0, i).trim();
      const value = decodeURIComponent(pair.slice(i + 1).trim());
      if (attrs.some((a) => /max-age=0$/i.test(a.trim())) || value === '') this.cookies.delete(name);
      else this.cookies.set(name, value);
    }
  }
  private cookieHeader() {
    return [...this.cookies].map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join('; ');
  }
  async get(path: string, headers: Record<string, string> = {}) {
    const res = await fetch(this.base + path, { redirect: 'manual', headers: { ...this.defaultHeaders, cookie: this.cookieHeader(), ...headers } });
    this.store(res);
    return { status: res.status, location: res.headers.get('location'), text: await res.text(), headers: res.headers };
  }
  async post(path: string, form: Record<string, string | string[]>, headers: Record<string, string> = {}) {
    const body = new URLSearchParams();
    for (const [k, v] of Object.entries(form)) for (const x of Array.isArray(v) ? v : [v]) body.append(k, x);
    const res = await fetch(this.base + path, {
      method: 'POST',
      redirect: 'manual',
      headers: { ...this.defaultHeaders, 'content-type': 'application/x-www-form-urlencoded', cookie: this.cookieHeader(), ...headers },
      body,
    });
    this.store(res);
    return { status: res.status, location: res.headers.get('location'), text: await res.text(), headers: res.headers };
  }
  /** The CSRF token of the last form on a page. */
  static csrf(html: string): string {
    const all = [...html.matchAll(/name="_csrf" value="([^"]*)"/g)];
    return all[all.length - 1]?.[1] ?? '';
  }
  async csrfOf(path: string) {
    return PortalClient.csrf((await this.get(path)).text);
  }
  async signUp(email: string, password = 'correct horse battery') {
    const token = await this.csrfOf('/signup');
    return this.post('/signup', { _csrf: token, email, password, org: '' });
  }
}
