import { type Dispatcher, fetch as undiciFetch } from 'undici';
import type { MailSink } from '../../src/mail/sink.ts';

/** Where a test reads the e-mails a portal sent (a MailSink of src/mail/sink.ts, or the portal's /dev/mail). */
export interface Mailbox {
  /** The text of the newest e-mail to this address whose text matches `pattern`, waiting for it to arrive. */
  text(to: string, pattern: RegExp): Promise<string>;
}

export interface ClientOptions {
  /** Another undici dispatcher (e.g. an Agent with connect.localAddress: a request from another client address). */
  dispatcher?: Dispatcher;
  mailbox?: Mailbox;
}

// A tiny cookie-keeping HTTP client for portal tests (no browser).
export class PortalClient {
  cookies = new Map<string, string>();
  lastSetCookies: string[] = [];
  constructor(
    readonly base: string,
    readonly defaultHeaders: Record<string, string> = {},
    readonly options: ClientOptions = {},
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
  private fetch(path: string, init: RequestInit): Promise<Response> {
    // node's own fetch does not take the npm undici's dispatchers: that package's fetch does
    if (this.options.dispatcher)
      return undiciFetch(this.base + path, { ...init, dispatcher: this.options.dispatcher } as never) as unknown as Promise<Response>;
    return fetch(this.base + path, init);
  }
  async get(path: string, headers: Record<string, string> = {}) {
    const res = await this.fetch(path, { redirect: 'manual', headers: { ...this.defaultHeaders, cookie: this.cookieHeader(), ...headers } });
    this.store(res);
    return { status: res.status, location: res.headers.get('location'), text: await res.text(), headers: res.headers };
  }
  async post(path: string, form: Record<string, string | string[]>, headers: Record<string, string> = {}) {
    const body = new URLSearchParams();
    for (const [k, v] of Object.entries(form)) for (const x of Array.isArray(v) ? v : [v]) body.append(k, x);
    const res = await this.fetch(path, {
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
  /** Only the sign-up form: the answer is the same page whether or not the e-mail has an account. */
  async signUpForm(email: string, password = 'correct horse battery', org = '') {
    const token = await this.csrfOf('/signup');
    return this.post('/signup', { _csrf: token, email, password, org });
  }
  /**
   * A new account, as a person makes one: the sign-up form, the link of the verification e-mail
   * (read from the mailbox), then the sign-in form. Answers the sign-in (303 to /dashboard).
   */
  async signUp(email: string, password = 'correct horse battery') {
    const form = await this.signUpForm(email, password);
    if (form.status !== 200) return form;
    const link = await this.verificationLink(email);
    const verified = await this.get(link);
    if (verified.status !== 200) return verified;
    return this.signIn(email, password);
  }
  async signIn(email: string, password = 'correct horse battery') {
    return this.post('/login', { _csrf: await this.csrfOf('/login'), email, password });
  }
  /** The path and query of the verification link in the newest e-mail to this address. */
  async verificationLink(email: string): Promise<string> {
    const mailbox = this.options.mailbox ?? devMailbox(this.base);
    const text = await mailbox.text(email.toLowerCase(), /\/verify\?token=/);
    const url = new URL(/https?:\/\/[^\s"<>]+\/verify\?token=[A-Za-z0-9_-]+/.exec(text)![0]);
    return url.pathname + url.search;
  }
}

/** The mailbox of a development portal: its /dev/mail page (CATRACA_DEV=1 with the SMTP sink of `npm start`). */
export function devMailbox(base: string): Mailbox {
  return {
    async text(to, pattern) {
      const deadline = Date.now() + 10000;
      for (;;) {
        const page = await (await fetch(`${base}/dev/mail`)).text();
        const decoded = page
          .replace(/&amp;/g, '&')
          .replace(/&lt;/g, '<')
          .replace(/&gt;/g, '>')
          .replace(/&quot;/g, '"')
          .replace(/&#39;/g, "'");
        for (const m of decoded.split('<article').slice(1)) if (m.includes(`data-to="${to}"`) && pattern.test(m)) return m;
        if (Date.now() > deadline) throw new Error(`no e-mail to ${to} matching ${pattern} at ${base}/dev/mail`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
  };
}

/** The mailbox of an SMTP sink a test started (src/mail/sink.ts). */
export function sinkMailbox(sink: MailSink): Mailbox {
  return { text: async (to, pattern) => (await sink.waitFor((m) => m.to.includes(to) && pattern.test(m.text))).text };
}
