import nodemailer from 'nodemailer';

// Sending e-mail: one small interface for the portal's messages (address verification, notices)
// and the next ones (companies: invitations, notifications). SMTP through nodemailer, configured
// by SMTP_URL (`smtp://user:pass@host:587`, STARTTLS when offered; `smtps://…:465`). `npm start`
// points it at the embedded sink of src/mail/sink.ts.

export interface Mail {
  /** one address, or several (one message to all of them) */
  to: string | string[];
  subject: string;
  text: string;
  html?: string;
  /** files, or images the html shows inline by `cid:` (e.g. a Pix QR code) */
  attachments?: MailAttachment[];
}

export interface MailAttachment {
  filename: string;
  content: Buffer;
  contentType: string;
  /** set: an inline image, `<img src="cid:…">` in the html */
  cid?: string;
}

export interface Mailer {
  /** false without SMTP_URL: sendMail refuses (MailNotConfiguredError), and sign-up is closed. */
  readonly configured: boolean;
  sendMail(mail: Mail): Promise<void>;
  close(): void;
}

export class MailNotConfiguredError extends Error {
  constructor() {
    super('e-mail is not configured (SMTP_URL is not set)');
    this.name = 'MailNotConfiguredError';
  }
}

/** A mailer for SMTP_URL (never logged: it may hold a password), from SMTP_FROM; not configured without a URL. */
export function createMailer(o: { url?: string; from: string }): Mailer {
  if (!o.url) {
    return {
      configured: false,
      sendMail: async () => {
        throw new MailNotConfiguredError();
      },
      close: () => {},
    };
  }
  const transport = nodemailer.createTransport({ url: o.url, connectionTimeout: 10_000, greetingTimeout: 10_000, socketTimeout: 30_000 } as never);
  return {
    configured: true,
    sendMail: async (m) => {
      await transport.sendMail({ from: o.from, to: m.to, subject: m.subject, text: m.text, html: m.html, attachments: m.attachments });
    },
    close: () => transport.close(),
  };
}
