import { en } from './en.ts';
import { ptBR, type Messages } from './pt-BR.ts';

export type Lang = 'pt-BR' | 'en';
export type MessageKey = keyof Messages;
export const LANGS: Lang[] = ['pt-BR', 'en'];
const catalogs: Record<Lang, Messages> = { 'pt-BR': ptBR, en };

export function parseLang(v: string | null | undefined): Lang | null {
  if (!v) return null;
  const s = v.toLowerCase();
  if (s === 'en' || s.startsWith('en-')) return 'en';
  if (s === 'pt' || s === 'pt-br' || s.startsWith('pt-')) return 'pt-BR';
  return null;
}

export function translator(lang: Lang) {
  const cat = catalogs[lang];
  return (key: MessageKey, vars: Record<string, string | number> = {}) =>
    cat[key].replace(/\{(\w+)\}/g, (_, name: string) => (name in vars ? String(vars[name]) : `{${name}}`));
}
export type T = ReturnType<typeof translator>;
