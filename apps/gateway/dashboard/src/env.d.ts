// Vite turns a CSS import into a style sheet on the page.
declare module '*.css';
