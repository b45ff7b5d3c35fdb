import type { Lang } from '../portal/i18n/index.ts';

// A translator over an app's message catalogs in pt-BR and English (the portal's and the
// console's): `{name}` placeholders filled from `vars`, a missing one left as it is.

export function makeTranslator<K extends string>(catalogs: Record<Lang, Record<K, string>>) {
  return (lang: Lang) => {
    const cat = catalogs[lang];
    return (key: K, vars: Record<string, string | number> = {}) =>
      cat[key].replace(/\{(\w+)\}/g, (_, name: string) => (name in vars ? String(vars[name]) : `{${name}}`));
  };
}
