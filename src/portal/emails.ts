import type pg from 'pg';
import { createLogger } from '../log.ts';
import type { Mail, Mailer } from '../mail/index.ts';
import type { User } from './auth.ts';
import { issueLink, type LinkPurpose } from './email-links.ts';
import { escapeHtml } from '../web/html.ts';
import type { Lang, T } from './i18n/index.ts';
import type { Role } from '../db/members.ts';

// The portal's e-mails, in the language of the request that caused them. Sent in the background:
// a sign-up answers at once whether its e-mail goes to a new account or an existing one, and an
// SMTP server that is slow or away never holds a page (a failure is logged, without the link).

const log = createLogger('portal');

export interface MailContext {
  db: pg.Pool;
  mailer: Mailer;
  /** The portal's public base URL (PORTAL_PUBLIC_URL, else its own): links never come from a request's Host. */
  site: { url: string };
}

const compose = (to: string, subject: string, text: string): Mail => ({
  to,
  subject,
  text,
  html: `<p>${escapeHtml(text)
    .replace(/(https?:\/\/[^\s<>&]+)/g, '<a href="$1">$1</a>')
    .replace(/\n\n/g, '</p><p>')
    .replace(/\n/g, '<br>')}</p>`,
});

function send(m: MailContext, mail: Mail, what: Record<string, string>): void {
  m.mailer.sendMail(mail).then(
    () => log.info('e-mail sent', what),
    (err: Error) => log.warn('e-mail not sent', { ...what, error: err.message }),
  );
}

/** Issues a link and e-mails it; false when the account had its e-mails for this hour (or e-mail is off). */
async function mailLink(m: MailContext, t: T, user: User, purpose: LinkPurpose, kind: 'verify' | 'notice'): Promise<boolean> {
  if (!m.mailer.configured) return false;
  const token = await issueLink(m.db, { userId: user.id, email: user.email, purpose });
  if (!token) {
    log.warn('e-mail not sent: too many for this account this hour', { user: user.id, kind });
    return false;
  }
  const base = m.site.url.replace(/\/+$/, '');
  const link = `${base}/${purpose === 'verify' ? 'verify' : 'reset'}?token=${token}`;
  const mail =
    kind === 'verify'
      ? compose(user.email, t('mail.verify_subject'), t('mail.verify_text', { link }))
      : compose(user.email, t('mail.notice_subject'), t('mail.notice_text', { link, login: `${base}/login` }));
  send(m, mail, { user: user.id, kind });
  return true;
}

/** The verification link (at sign-up, and the "send again" button). */
export const sendVerification = (m: MailContext, t: T, user: User) => mailLink(m, t, user, 'verify', 'verify');

/** Someone signed up with an address that has an account: its owner is told, with a reset link. */
export const sendSignupNotice = (m: MailContext, t: T, user: User) => mailLink(m, t, user, 'reset', 'notice');

/**
 * The invitation to join a tenant (src/portal/members.ts), in the inviter's language. It names the
 * inviter's address and the role, not the tenant's name: a name is whatever its owner typed, and
 * the mail goes to an address of their choosing. The page the link opens shows the name.
 */
export function sendInvitation(m: MailContext, t: T, lang: Lang, a: { to: string; token: string; inviter: string; role: Role; invitationId: string }): void {
  const base = m.site.url.replace(/\/+$/, '');
  const link = `${base}/invite?token=${a.token}${lang === 'en' ? '&lang=en' : ''}`;
  const mail = compose(a.to, t('mail.invite_subject'), t('mail.invite_text', { link, inviter: a.inviter, role: t(`role.${a.role}`) }));
  send(m, mail, { invitation: a.invitationId, kind: 'invite' });
}
