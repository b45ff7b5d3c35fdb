// The languages every web app speaks (the portal's and the console's), how a cookie, `?lang=` or
// Accept-Language value names one, and a translator over an app's message catalogs in each:
// `{name}` placeholders filled from `vars`, a missing one left as it is.

export type Lang = 'pt-BR' | 'en';
export const LANGS: Lang[] = ['pt-BR', 'en'];

export function parseLang(v: string | null | undefined): Lang | null {
  if (!v) return null;
  const s = v.toLowerCase();
  if (s === 'en' || s.startsWith('en-')) return 'en';
  if (s === 'pt' || s === 'pt-br' || s.startsWith('pt-')) return 'pt-BR';
  return null;
}

export function makeTranslator<K extends string>(catalogs: Record<Lang, Record<K, string>>) {
  return (lang: Lang) => {
    const cat = catalogs[lang];
    return (key: K, vars: Record<string, string | number> = {}) =>
      cat[key].replace(/\{(\w+)\}/g, (_, name: string) => (name in vars ? String(vars[name]) : `{${name}}`));
  };
}
