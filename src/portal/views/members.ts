import { dateTime } from '../../web/format.ts';
import { html, type SafeHtml } from '../../web/html.ts';
import { type Member, ROLES, type Role } from '../../db/members.ts';
import type { Invitation, OpenInvitation } from '../members.ts';
import { may } from '../roles.ts';
import { csrfField, type ViewCtx } from './layout.ts';

// The pages of team members (issue 20): the members page, one's account, an invitation link.

/** The roles a member of this role may give (invite with, change to): an admin never owner. */
export const grantableRoles = (role: Role | undefined): Role[] => (role && may(role, 'members.owners') ? [...ROLES] : ROLES.filter((r) => r !== 'owner'));

function roleOptions(c: ViewCtx, roles: Role[], selected: string): SafeHtml {
  return html`${roles.map((r) => html`<option value="${r}" ${r === selected ? html`selected` : ''}>${c.t(`role.${r}`)}</option>`)}`;
}

export function rolesTable(c: ViewCtx): SafeHtml {
  return html`<table data-testid="roles-table"><thead><tr><th>${c.t('members.role')}</th><th>${c.t('members.may')}</th></tr></thead><tbody>
${ROLES.map((r) => html`<tr><td>${c.t(`role.${r}`)}</td><td>${c.t(`role.${r}_may`)}</td></tr>`)}
</tbody></table>`;
}

function memberRow(c: ViewCtx, m: Member, me: string | undefined, grantable: Role[]): SafeHtml {
  const touchable = grantable.includes(m.role);
  return html`<tr data-testid="member-row" data-member-id="${m.id}">
<td>${m.email}${m.email === me ? html` <span class="muted">${c.t('members.you')}</span>` : ''}</td>
<td data-testid="member-role">${c.t(`role.${m.role}`)}</td>
<td>${dateTime(c.lang, m.created_at)}</td>
<td>${
    touchable
      ? html`<form method="post" action="/members/${m.id}/role" class="inline">${csrfField(c)}<label class="inline">${c.t('members.new_role')} <select name="role">${roleOptions(c, grantable, m.role)}</select></label> <button type="submit" class="small">${c.t('members.change_role')}</button></form>
<a class="button danger small" href="/members/${m.id}/remove">${c.t('members.remove')}</a>`
      : ''
  }</td>
</tr>`;
}

function invitationRow(c: ViewCtx, i: Invitation, grantable: Role[]): SafeHtml {
  const expired = i.expires_at.getTime() <= Date.now();
  return html`<tr data-testid="invitation-row">
<td>${i.email}</td><td>${c.t(`role.${i.role}`)}</td><td>${i.invited_by_email ?? '—'}</td>
<td>${expired ? html`<span class="badge s-EXPIRADA">${c.t('members.expired')}</span>` : dateTime(c.lang, i.expires_at)}</td>
<td>${grantable.includes(i.role) ? html`<form method="post" action="/members/invitations/${i.id}/revoke" class="inline">${csrfField(c)}<button type="submit" class="danger small">${c.t('members.revoke_invite')}</button></form>` : ''}</td>
</tr>`;
}

export function membersPage(c: ViewCtx, d: { members: Member[]; invitations: Invitation[]; form?: { email?: string; role?: string } }): SafeHtml {
  const grantable = grantableRoles(c.role);
  return html`<h1>${c.t('members.title')}</h1>
<section class="card">
<table data-testid="members"><thead><tr><th>${c.t('auth.email')}</th><th>${c.t('members.role')}</th><th>${c.t('members.since')}</th><th></th></tr></thead><tbody>
${d.members.map((m) => memberRow(c, m, c.email, grantable))}
</tbody></table>
</section>
<section class="card narrow">
<h2>${c.t('members.invite_title')}</h2>
<form method="post" action="/members/invite" data-testid="invite-form">
${csrfField(c)}
<label>${c.t('auth.email')}<input type="email" name="email" required maxlength="254" value="${d.form?.email ?? ''}"></label>
<label>${c.t('members.role')}<select name="role">${roleOptions(c, grantable, d.form?.role ?? 'developer')}</select></label>
<small>${c.t('members.invite_hint')}</small>
<button type="submit">${c.t('members.invite_button')}</button>
</form>
</section>
<section class="card"><h2>${c.t('members.pending')}</h2>
${
  d.invitations.length === 0
    ? html`<p class="muted">${c.t('common.none')}</p>`
    : html`<table data-testid="invitations"><thead><tr><th>${c.t('auth.email')}</th><th>${c.t('members.role')}</th><th>${c.t('members.invited_by')}</th><th>${c.t('members.expires')}</th><th></th></tr></thead><tbody>
${d.invitations.map((i) => invitationRow(c, i, grantable))}
</tbody></table>`
}
</section>
<section class="card"><h2>${c.t('members.roles_title')}</h2>${rolesTable(c)}</section>`;
}

export function removeMemberPage(c: ViewCtx, m: Member, activeKeys: number): SafeHtml {
  return html`<section class="card narrow">
<h1>${c.t('members.remove_title', { email: m.email })}</h1>
<p>${c.t('members.remove_text')}</p>
<form method="post" action="/members/${m.id}/remove">
${csrfField(c)}
${activeKeys > 0 ? html`<label class="check"><input type="checkbox" name="revoke_keys" value="1" checked> ${c.t('members.revoke_keys', { n: activeKeys })}</label>` : ''}
<button type="submit" class="danger">${c.t('members.remove_confirm')}</button>
<a href="/members">${c.t('common.cancel')}</a>
</form>
</section>`;
}

export function accountPage(c: ViewCtx, d: { company: string; role: Role }): SafeHtml {
  return html`<h1>${c.t('account.title')}</h1>
<section class="card narrow" data-testid="account">
<p>${c.t('auth.email')}: <strong>${c.email}</strong></p>
<p>${c.t('account.company')}: <strong>${d.company}</strong></p>
<p>${c.t('account.role')}: <strong data-testid="my-role">${c.t(`role.${d.role}`)}</strong> — ${c.t(`role.${d.role}_may`)}</p>
</section>
<section class="card narrow">
<h2>${c.t('account.leave_title', { company: d.company })}</h2>
<p>${c.t('account.leave_text')}</p>
<form method="post" action="/account/leave">${csrfField(c)}<button type="submit" class="danger">${c.t('account.leave_button')}</button></form>
</section>`;
}

export function invitationPage(c: ViewCtx, inv: OpenInvitation, token: string): SafeHtml {
  const text = c.t('invite.text', {
    inviter: inv.invited_by_email ?? c.t('invite.someone'),
    email: inv.email,
    company: inv.tenant_name,
    role: c.t(`role.${inv.role}`),
    may: c.t(`role.${inv.role}_may`),
  });
  return html`<section class="card narrow" data-testid="invitation">
<h1>${c.t('invite.title', { company: inv.tenant_name })}</h1>
<p>${text}</p>
<form method="post" action="/invite">
${csrfField(c)}
<input type="hidden" name="token" value="${token}">
<label>${c.t('auth.email')}<input type="email" value="${inv.email}" readonly autocomplete="username"></label>
<label>${c.t('auth.password')}<input type="password" name="password" autocomplete="new-password" minlength="10" required><small>${c.t('auth.password_hint')}</small></label>
<button type="submit">${c.t('invite.accept')}</button>
</form>
</section>`;
}
